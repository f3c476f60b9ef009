"""Backbones beyond the paper's: PyG's dense layers by name, a user's dense layer by path.

PyG's dense convolutions (`torch_geometric.nn.dense`) take the batches our layers take:
x (B, N, F), adj (B, N, N) and a node mask (B, N). So any of them, or a user's layer of
that form, can stand where a layer of the paper's family (`ablate.models.layers.GraphLayer`)
stands in `ablate.models.network.GraphNet`, and every attention axis (placement, scorer,
threshold / top-k, init, normaliser, supervision) applies unchanged. `DenseLayer` wraps one:
it reads the induced subgraph's adjacency (`Graph.adjacency`: after pooling a dropped node's
edges leave too), applies a ReLU and zeroes absent nodes, as a layer of the family does.

Names (`DENSE_LAYERS`, the ``backbone`` values):

- ``dense_gcn``: `DenseGCNConv`, Kipf & Welling (ICLR 2017), D^-1/2 (A + I) D^-1/2 X W.
- ``dense_gin``: `DenseGINConv`, Xu et al. (ICLR 2019), MLP((1 + eps) x_i + sum_j A_ij x_j),
  its MLP Linear(C, hidden), ReLU, Linear(hidden, F) (a single Linear for hidden = 0).
- ``dense_graph``: `DenseGraphConv`, Morris et al. (AAAI 2019), W1 x_i + W2 sum_j A_ij x_j.
- ``dense_sage``: `DenseSAGEConv`, Hamilton et al. (NeurIPS 2017), W1 x_i + W2 mean_j x_j.
- ``dense_gat``: `DenseGATConv`, Velickovic et al. (ICLR 2018), one attention head.

A user's layer is named by 'package.module:Class' (`ablate.user_code`): a `torch.nn.Module`
class built as ``Class(in_channels, out_channels)`` whose ``forward(x, adj, mask)`` returns
(B, N, out_channels); `check_layer` builds and runs it once on a tiny batch when the config
is validated, so a path that does not fit is one line before anything trains.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from ablate.errors import ConfigError
from ablate.models.layers import Graph
from ablate.user_code import is_object_path, load_object

_DENSE = "torch_geometric.nn.dense"
# backbone name -> 'module:attr' of the layer class (imported on use: PyG is slow to import)
DENSE_LAYERS: dict[str, str] = {
    "dense_gcn": f"{_DENSE}:DenseGCNConv",
    "dense_gin": f"{_DENSE}:DenseGINConv",
    "dense_graph": f"{_DENSE}:DenseGraphConv",
    "dense_sage": f"{_DENSE}:DenseSAGEConv",
    "dense_gat": f"{_DENSE}:DenseGATConv",
}
MLP_LAYERS = ("dense_gin",)  # dense layers built around an MLP whose width is `hidden`
SIGNATURE = ("a torch.nn.Module class built as Class(in_channels, out_channels) whose "
             "forward(x (B, N, F), adj (B, N, N), mask (B, N)) returns (B, N, out_channels)")


def is_dense(backbone: str) -> bool:
    """Whether `backbone` is a dense layer of the (x, adj, mask) form: a PyG name or a path."""
    return backbone in DENSE_LAYERS or is_object_path(backbone)


def layer_class(backbone: str) -> type:
    """The class of a dense backbone: PyG's for a name of `DENSE_LAYERS`, else the user's
    'package.module:Class' (one `ConfigError` line when it does not import or is no class)."""
    path = DENSE_LAYERS.get(backbone, backbone)
    cls = load_object(path, "backbone")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        what = (f"the class {cls.__module__}.{cls.__qualname__}" if isinstance(cls, type)
                else f"a {type(cls).__name__}")
        raise ConfigError(f"backbone {backbone!r} is {what}, not a torch.nn.Module class; "
                          f"expected {SIGNATURE}")
    return cls


def build_conv(backbone: str, in_channels: int, out_channels: int, hidden: int = 0) -> nn.Module:
    """The dense convolution of `backbone` from `in_channels` to `out_channels` features;
    ``dense_gin``'s MLP has a hidden layer of width `hidden` (none for 0)."""
    cls = layer_class(backbone)
    if backbone == "dense_gin":
        mlp = (nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, out_channels))
               if hidden > 0 else nn.Linear(in_channels, out_channels))
        return cls(mlp)
    return cls(in_channels, out_channels)


class DenseLayer(nn.Module):
    r"""A dense layer of the (x, adj, mask) form as a layer of `GraphNet`.

    .. math:: \text{out} = \mathrm{ReLU}(\mathrm{conv}(X, A \odot m m^\top, m)) \odot m

    Args:
        backbone: a name of `DENSE_LAYERS` or a user's 'package.module:Class'.
        in_channels: input features C.
        out_channels: output features F.
        hidden: width of ``dense_gin``'s MLP hidden layer (0 = a single Linear).

    Shapes: x (B, N, C), graph with (B, N, N) -> (B, N, F).
    """

    activation = True  # its output is >= 0 and 0 on absent nodes (GraphNet's readout reads it)

    def __init__(self, backbone: str, in_channels: int, out_channels: int, hidden: int = 0):
        super().__init__()
        self.conv = build_conv(backbone, in_channels, out_channels, hidden)

    def reset_parameters(self) -> None:
        reset = getattr(self.conv, "reset_parameters", None)
        if callable(reset):
            reset()

    def forward(self, x: Tensor, graph: Graph) -> Tensor:
        h = self.conv(x, graph.adjacency(), graph.mask)  # (B, N, F)
        return torch.relu(h) * graph.maskf.unsqueeze(-1)


@functools.cache
def check_layer(backbone: str) -> None:
    """Build a user's layer and run it once on a tiny batch (2 graphs of 3 nodes, 3 -> 4
    features): one `ConfigError` line naming what does not fit `SIGNATURE`. Once per path."""
    cls = layer_class(backbone)
    try:
        layer = cls(3, 4)
    except Exception as e:  # noqa: BLE001 - the user's constructor: one line
        raise ConfigError(f"backbone {backbone!r}: {cls.__name__}(3, 4) raised "
                          f"{type(e).__name__}: {_first(e)}; expected {SIGNATURE}") from None
    x = torch.randn(2, 3, 3)
    adj = torch.tensor([[0.0, 1, 0], [1, 0, 1], [0, 1, 0]]).expand(2, 3, 3).clone()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    try:
        with torch.no_grad():
            out = layer(x, adj, mask)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"backbone {backbone!r}: forward(x, adj, mask) on a tiny batch raised "
                          f"{type(e).__name__}: {_first(e)}; expected {SIGNATURE}") from None
    shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    if shape != (2, 3, 4):
        raise ConfigError(f"backbone {backbone!r}: forward(x (2, 3, 3), adj (2, 3, 3), mask (2, 3)) "
                          f"of {cls.__name__}(3, 4) returned {shape}, not (2, 3, 4); expected "
                          f"{SIGNATURE}")


@functools.cache
def unpackable(backbone: str) -> str | None:
    """Why members of a user's layer cannot train as one vmapped pack, or None when they can
    (every name of `DENSE_LAYERS` can): its forward on a tiny batch under `torch.func.vmap`
    over two stacked copies of its parameters raised (a data-dependent shape, `.item()`, an
    in-place write to an input). Such a layer trains seed by seed. Once per path."""
    if not is_object_path(backbone):
        return None
    from torch.func import functional_call, vmap

    layer = layer_class(backbone)(3, 4)
    params = {k: torch.stack([v.detach(), v.detach()]) for k, v in layer.named_parameters()}
    x = torch.randn(2, 2, 3, 3)
    adj = torch.tensor([[0.0, 1, 0], [1, 0, 1], [0, 1, 0]]).expand(2, 3, 3).clone()
    mask = torch.tensor([[True, True, True], [True, True, False]])
    try:
        vmap(lambda p, x: functional_call(layer, p, (x, adj, mask)))(params, x)
    except Exception as e:  # noqa: BLE001 - any failure means: not packable
        return f"its forward does not run under torch.func.vmap ({type(e).__name__}: {_first(e)})"
    return None


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"
