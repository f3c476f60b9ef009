"""Models: the GNN layer family, attention pooling, normalisers and the full network."""

from ablate.models.layers import Graph, GraphLayer
from ablate.models.network import GraphNet, NetOutput
from ablate.models.pooling import AttentionPool, GaoTopKPool

__all__ = ["AttentionPool", "GaoTopKPool", "Graph", "GraphLayer", "GraphNet", "NetOutput"]
