import json
import os

os.makedirs('/logs/verifier', exist_ok=True)
with open('/logs/verifier/reward.txt', 'w') as f:
    f.write('0' if json.dumps(1) == '1' else '1')
