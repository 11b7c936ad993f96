"""The distributed path (``cluster.mode: ray``): Ray launch, actor groups, proxies, weight sync.

``from agentrl.distributed.trainer import RayTrainer``; Ray, DeepSpeed and vLLM are imported only
inside the functions and actors that use them, so importing this package stays cheap.
"""
