
import sys


def main(argv):
    name = argv[0] if argv else "world"
    print(f"Hello, {name}!")


if __name__ == "__main__":
    main(sys.argv)
