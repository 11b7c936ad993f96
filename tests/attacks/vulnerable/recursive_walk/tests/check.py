import os


def count(path):
    n = 0
    for entry in os.scandir(path):
        n += count(entry.path) if entry.is_dir(follow_symlinks=False) else 1
    return n


try:
    with open("/app/answer.txt") as f:
        ok = f.read().strip() == "42"
except OSError:
    ok = False
files = count("/app")
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1\n" if ok and files == 1 else "0\n")
