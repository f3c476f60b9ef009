"""ablate: a Ray-distributed ablation study of node attention and pooling in GNNs."""

__version__ = "0.1.0"
