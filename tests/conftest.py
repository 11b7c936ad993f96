"""Test configuration shared by every test: environment variables the stack needs on CPU."""

import os

_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "DS_ACCELERATOR": "cpu",
    "MASTER_ADDR": "127.0.0.1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "all",
    "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0",
}
for _k, _v in _ENV.items():
    os.environ.setdefault(_k, _v)
