"""Small models reachable as `tests.tiny_models:CALLABLE` from test configs (the `module:callable` path)."""
import torch
from torch import nn


class ResidualMLP(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, width)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = self.fc1(x)
        h += self.fc2(torch.relu(h))  # functional relu and in-place residual add, outside leaf modules
        return self.out(h).flatten()


def make_mlp(width: int = 16) -> nn.Module:
    return ResidualMLP(width)


def explode(**kwargs):
    raise RuntimeError("this factory always fails")


class Picky(nn.Module):
    """A leaf module that only accepts positive inputs: it runs inside its model (which feeds it ``x.abs() + 1``) but
    fails when replayed on random inputs, as a configuration that cannot be replayed does."""

    def forward(self, x):
        if not bool((x > 0).all()):
            raise ValueError("picky: inputs must be positive")
        return x * 2


class PickyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.picky = Picky()

    def forward(self, x):
        return self.picky(self.fc(x).abs() + 1).sum(dim=1)


def make_picky() -> nn.Module:
    return PickyNet()


def _spin(seconds: float, cpu: bool = False) -> None:
    """Busy-wait ``seconds`` of the wall clock, or with ``cpu`` of this thread's CPU time (work of a known size: on a
    loaded host it takes longer in wall time, as a real operator does)."""
    import time

    now = time.thread_time if cpu else time.perf_counter
    t0 = now()
    while now() - t0 < seconds:
        pass


class _Timed(torch.autograd.Function):
    """Identity whose forward and backward each take a known time (a busy wait, whatever the machine's load)."""

    @staticmethod
    def forward(ctx, x, forward_s, backward_s, cpu):
        ctx.backward_s, ctx.cpu = backward_s, cpu
        _spin(forward_s, cpu)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        _spin(ctx.backward_s, ctx.cpu)
        return grad.clone(), None, None, None


class Timed(nn.Module):
    """A leaf module whose forward costs ``forward_ms`` and whose backward ``backward_ms``, by construction."""

    def __init__(self, forward_ms: float, backward_ms: float, cpu: bool = False):
        super().__init__()
        self.forward_s, self.backward_s, self.cpu = forward_ms / 1e3, backward_ms / 1e3, cpu

    def forward(self, x):
        return _Timed.apply(x, self.forward_s, self.backward_s, self.cpu)


def make_timed(layers: int = 3, forward_ms: float = 0.5, backward_ms: float = 2.0, cpu: bool = False) -> nn.Module:
    """``layers`` Timed modules in a row behind a Linear (so the input's gradient is needed): a training iteration
    costs about layers x (forward_ms + backward_ms), of the wall clock or with ``cpu`` of CPU time."""
    return nn.Sequential(nn.Linear(8, 8), *[Timed(forward_ms, backward_ms, cpu) for _ in range(layers)])


class _FreshBuffer(nn.Module):
    def __init__(self, mib: int):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.elements = mib * 2**18  # float32

    def forward(self, x):
        return torch.zeros(self.elements).add_(self.fc(x).sum())


def make_fresh_buffer(mib: int = 48) -> nn.Module:
    """A model whose iteration writes one fresh buffer of ``mib`` MiB: above glibc's largest mmap threshold (32 MiB),
    so a plain process maps and returns it at every iteration, a page fault per 4 KiB page."""
    return _FreshBuffer(mib)


def make_activations(width: int = 256) -> nn.Module:
    """Two ReLUs on inputs of the same shape, one in place (as torchvision's models use them) and one not."""
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(inplace=True), nn.Linear(width, width), nn.ReLU())


class _NaNOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) / 0.0 * 0.0  # 0 / 0 and inf * 0: NaN everywhere


def make_nan() -> nn.Module:
    """A model whose every output is NaN."""
    return _NaNOut()


class _Mutating(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x.mul_(0.5)  # writes into its own input: the next iteration sees other values
        return self.fc(x)


def make_mutating() -> nn.Module:
    """A model that scales its input in place."""
    return _Mutating()


class _EarlyExit(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
            if float(x.detach().mean()) > 0:  # data-dependent: how many blocks run depends on the input
                break
        return x


def make_early_exit() -> nn.Module:
    """A model whose number of blocks run depends on its input (data-dependent control flow)."""
    torch.manual_seed(3)
    return _EarlyExit()


class _FastEncoder(nn.Module):
    """``nn.TransformerEncoder`` layers that take PyTorch's fused inference fast path (batch_first, eval, no grad)."""

    def __init__(self, d_model: int = 32, layers: int = 2):
        super().__init__()
        self.proj = nn.Linear(8, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(torch.relu(self.proj(x))).sum(dim=1)


def make_fast_encoder(d_model: int = 32, layers: int = 2) -> nn.Module:
    return _FastEncoder(d_model, layers)


class _OneSampleOnly(nn.Module):
    """A model whose forward fails at any batch but 1 (it assumes one sample)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] != 1:
            raise RuntimeError("this model takes one sample at a time")
        return self.lin(x)


def make_one_sample_only():
    return _OneSampleOnly()


class Passes(nn.Module):
    """A leaf module of a class the op table does not list: ``passes`` scalings and a relu per call."""

    def __init__(self, passes: int = 1):
        super().__init__()
        self.passes = passes

    def forward(self, x):
        for _ in range(self.passes):
            x = x * 1.5
        return torch.relu(x)


def make_passes(passes: int = 1, width: int = 16) -> nn.Module:
    """ResidualMLP's first Linear, then a :class:`Passes` of ``passes``, then its output layer."""
    return nn.Sequential(nn.Linear(8, width), Passes(passes), nn.Linear(width, 1))


def make_counted(path: str, width: int = 8) -> nn.Module:
    """A small MLP that appends a line to ``path`` each time it is built (how often a check builds it)."""
    with open(path, "a") as f:
        f.write("built\n")
    return make_mlp(width)
