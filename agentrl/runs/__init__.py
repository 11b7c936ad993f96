"""What a run directory holds and the rules for it: ``tracking`` (metrics.jsonl, TensorBoard, wandb, the
progress bar, heartbeats, learning curves), ``checkpoint`` (atomic checkpoints and the trainer state),
``episodes`` (the episode record: samples.jsonl and eval.json, versioned) and ``run_dir`` (two runs never
mix: ``--resume``, ``--overwrite``). Shared by the RL driver, the supervised stages and the viewer's reader."""
