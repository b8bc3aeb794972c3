# The folder that `vram run --allocator vram` puts first on PYTHONPATH; see sitecustomize.py.
