"""tests/python/cpu_as_gpu.py -- CPU tensors that the package's entries take for CUDA ones.

The host-layer tests (test_dense_host.py, test_decode_host.py) run the
public entries on a machine without a GPU: each installs a fake library
(fa.library) whose kernels read and write host memory through the pointers
they are given, wraps its tensors with gpu(), and calls install() for the
rest of what a launch touches (the current device and stream, capture, the
workspace). Needs torch; the tests import it only after checking that.
"""
import torch

from flashattn_stages import dispatch, fa, flash_op


class OnGpu(torch.Tensor):
    """A CPU tensor that says it is on a GPU: the entry's checks pass and
    its data_ptr() is a host address the fake kernel reads."""
    @property
    def is_cuda(self):
        return True


def gpu(t):
    return t.as_subclass(OnGpu)


def install(lib):
    """fa.library() returns lib; device 'index -1' is current; no stream is
    capturing; stream 0; workspaces are host memory; outputs start as NaN."""
    fa.library = lambda: lib
    torch.cuda.current_device = lambda: -1
    torch.cuda.is_current_stream_capturing = lambda: False
    dispatch.raw_stream = lambda index: 0
    dispatch.workspace = lambda nbytes, index, stream: torch.empty(nbytes, dtype=torch.uint8)
    flash_op.poison_outputs = True
