"""CUDA kernels of this project (kernels/*.cu) compiled with CuPy, and the cuDNN baseline through ctypes."""
