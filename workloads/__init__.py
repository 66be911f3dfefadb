"""Reference PyTorch workloads for slurm-gavel: Gavel's seven model families on synthetic data.

``python -m workloads --job-type "ResNet-50 (batch size 64)" --steps 100 [--tiny]`` or
``python -m workloads.resnet50 --batch-size 64 --steps 100``. See workloads/trainer.py.
"""
