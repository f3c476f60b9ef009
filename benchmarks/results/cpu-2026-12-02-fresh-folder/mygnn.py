"""A user's own module: a PyG InMemoryDataset of small graphs built in code (no download),
a dense GNN layer with the (x, adj, mask) signature, and a trial kind of one's own."""
import torch
from torch_geometric.data import Data, InMemoryDataset


class StarsAndPaths(InMemoryDataset):
    """Graphs of 5..14 nodes: a star (label 1) or a path (label 0), random node features."""

    def __init__(self, root, n_graphs=60, seed=0, transform=None, pre_transform=None):
        self.n_graphs, self.seed = n_graphs, seed
        super().__init__(root, transform, pre_transform)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self):
        return []

    @property
    def processed_file_names(self):
        return [f"stars_paths_{self.n_graphs}_{self.seed}.pt"]

    def download(self):
        pass

    def process(self):
        g = torch.Generator().manual_seed(self.seed)
        graphs = []
        for i in range(self.n_graphs):
            n = int(torch.randint(5, 15, (1,), generator=g))
            star = i % 2 == 1
            if star:
                src, dst = torch.zeros(n - 1, dtype=torch.long), torch.arange(1, n)
            else:
                src, dst = torch.arange(n - 1), torch.arange(1, n)
            edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
            x = torch.rand(n, 3, generator=g)
            graphs.append(Data(x=x, edge_index=edge_index, y=torch.tensor([int(star)]), num_nodes=n))
        self.save(graphs, self.processed_paths[0])


class MaxNeighbourConv(torch.nn.Module):
    """x_i W1 + max over neighbours j of x_j W2; absent nodes give zero."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.root = torch.nn.Linear(in_channels, out_channels)
        self.rel = torch.nn.Linear(in_channels, out_channels, bias=False)

    def reset_parameters(self):
        self.root.reset_parameters()
        self.rel.reset_parameters()

    def forward(self, x, adj, mask):  # (B, N, F), (B, N, N), (B, N) -> (B, N, out)
        h = self.rel(x)  # (B, N, out)
        neigh = h.unsqueeze(1).expand(-1, h.shape[1], -1, -1)  # (B, N_i, N_j, out)
        neigh = neigh.masked_fill(adj.unsqueeze(-1) <= 0, float("-inf"))
        agg = neigh.max(dim=2).values
        agg = torch.where(torch.isfinite(agg), agg, torch.zeros_like(agg))
        return (self.root(x) + agg) * mask.unsqueeze(-1)


# A trial kind of one's own: the graph trials, each record also naming the process that ran
# it (so the store shows which worker imported this module).
import os  # noqa: E402

from ablate.trial.graph import GraphKind  # noqa: E402


class PidGraphKind(GraphKind):
    name = "pid_graph"
    store_columns = GraphKind.store_columns + (("worker_pid", "int64"),)

    def run(self, cfg):
        return self._tag(super().run(cfg))

    def run_pack(self, cfgs):
        return [self._tag(r) for r in super().run_pack(cfgs)]

    @staticmethod
    def _tag(result):
        for rec in result.records:
            rec["worker_pid"] = os.getpid()
        return result


KIND = PidGraphKind()
