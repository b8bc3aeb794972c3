"""torch.cuda.graphs of the fake torch."""

import torch


class CUDAGraph:
    def capture_begin(self, pool=None, capture_error_mode="global"):
        torch.calls.append(("capture_begin",))

    def capture_end(self):
        torch.calls.append(("capture_end",))


class graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph

    def __enter__(self):
        torch.calls.append(("graph.__enter__",))
        self.cuda_graph.capture_begin()

    def __exit__(self, *exc):
        self.cuda_graph.capture_end()
