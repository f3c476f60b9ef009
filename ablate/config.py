"""One trial's configuration: a typed dataclass, the reference recipes, validation, identity.

`TrialConfig` holds every ablation axis (one field, its doc in the field's metadata). Fields left as
`None` take the reference recipe of SPEC §3 for the trial's dataset and
backbone (`resolve`). `validate` rejects unknown values with a one-line
`ConfigError` naming the valid choices; `trial_id` hashes the resolved config
together with the dataset recipe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

from ablate.data import EARLIER_MNIST, EARLIER_TU_SPLIT, is_open
from ablate.errors import ConfigError, choice_error
from ablate.models.backbones import DENSE_LAYERS, MLP_LAYERS, check_layer, is_dense
from ablate.models.normalizers import NORMALIZERS
from ablate.user_code import is_object_path

# chebygin_ref: ChebyGIN as the dataset's reference script runs it (COLORS, MNIST-75SP: mean
# aggregation, no hidden MLP; TRIANGLES: sum, hidden 64), the recipe behind the papers' rows
PAPER_BACKBONES = ("gcn", "gin", "chebynet", "chebygin", "chebygin_ref")
# beyond the paper: PyG's dense layers by name (ablate.models.backbones), and any user's dense
# layer of the (x, adj, mask) form by 'package.module:Class' (not listed: any such path)
BACKBONES = (*PAPER_BACKBONES, *DENSE_LAYERS)
AGGREGATIONS = ("mean", "sum")
READOUTS = ("sum", "mean", "max")
SCORERS = ("fc", "fc_hidden", "gnn")
SCORER_INPUTS = ("prev", "curr")
SELECTIONS = ("threshold", "topk", "gao")  # gao = Gao & Ji top-k (PyG TopKPooling, tanh gate)
SUPERVISIONS = ("unsup", "sup", "weak", "gt")
INIT_DISTS = ("default", "normal", "uniform")
DEVICES = ("auto", "cpu", "cuda")
STEPS = ("auto", "replay", "eager")  # how a packed training step runs (ablate/trial/packed.py)
EXECUTION_FIELDS = ("study", "device", "step")  # not part of a trial's identity
LR_TIMINGS = ("published", "early")  # when a listed LR drop applies (`lr_at`)
# Changed defaults: every axis (`axes`) or data-recipe parameter (`data`) that was added, or
# whose default changed, after results were stored, with the value that reproduces what ran
# before. At that value it is left out of the trial id, so the trials stored before keep their
# ids; at any other value (a new default included) it is hashed, so whatever trains otherwise
# is a new trial. `trial_id` is the one place that reads it (`analysis.load.ADDED_AXES` mirrors
# its axes: the analysis imports nothing from ablate); the data values are the data recipes'
# own (`ablate.data`, whose recipe hashes leave them out). `tests/test_trial_ids.py` pins one
# trial of every study at the ids it had before each change.
CHANGED_DEFAULTS: dict[str, dict] = {
    "axes": {
        "scorer_relu": False,  # the gnn scorer's ReLU, an ablation axis added later
        "lr_timing": "early",  # issue 41: drops applied from the listed epoch, not the next
    },
    "data": {
        **EARLIER_MNIST,  # issue 26: MNIST-75SP's SLIC rule and noise
        "split": EARLIER_TU_SPLIT,  # issue 33: the TU split rule before the authors' one
    },
}
# How dropout masks are drawn, hashed into the id of dropout > 0 trials only: trials stored
# before it drew them from torch's RNG (other numbers), so their ids no longer match
DROPOUT_RNG = "counter-v1"  # ablate.models.dropout: a hash of (seed, step, layer, element)
# Scorers whose first layer the reference draws from N(0, 1) * scale (its default scale is 1,
# so always unless told otherwise); the gnn scorer keeps the framework init. fc_hidden was
# added here later: before, it resolved to the framework init. Its trials with init_dist
# unset now resolve to "normal", a different resolved config and so a different trial id;
# stored fc_hidden trials keep their ids and meaning (init_dist "default" is hashed in them).
INIT_REFERENCE = {"fc": "normal", "fc_hidden": "normal", "gnn": "default"}
TU_DATASETS = ("proteins", "dd", "collab")
WEAK_TARGETS = ("logit", "prob")  # y in |y(G - i) - y(G)| of weak supervision (ablate/trial/weak.py)
REGRESSION_DATASETS = ("colors", "triangles")  # trained with MSE on a count, accuracy of round(y)


def _doc(default, doc: str):
    """A config field with `default` and its documentation in `metadata["doc"]`, which
    `--help` prints (whitespace, line breaks included, collapses to single spaces)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class TrialConfig:
    """Every axis of one trial. `None` = the reference recipe for this dataset/backbone."""

    study: str = _doc("adhoc", "study name (result store folder)")
    dataset: str = _doc("colors", """colors, triangles, mnist_sp, digits_sp, proteins, dd, collab; any TU
        set as tu:NAME (e.g. tu:NCI1); pyg: your own PyG dataset (data.target=module:Class)""")
    data_params: tuple = _doc((), "dataset recipe overrides (sizes, seeds, path): a dict or sorted pairs")
    backbone: str = _doc("chebygin", """gcn, gin, chebynet, chebygin (SPEC §2 layer family), chebygin_ref;
        PyG's dense layers dense_gcn, dense_gin, dense_graph, dense_sage, dense_gat; or your own
        dense layer as package.module:Class (built as Class(in_channels, out_channels), forward(x,
        adj, mask))""")
    K: int | None = _doc(None, "Chebyshev scales; 1 for gcn/gin")
    aggregation: str | None = _doc(None, "mean or sum (derived from the backbone)")
    hidden: int | None = _doc(None, "hidden width of the per-layer MLP; 0 = single Linear+ReLU")
    filters: tuple[int, ...] | None = _doc(None, "output channels of each graph layer")
    readout: str | None = _doc(None, "sum, mean or max over nodes")
    dropout: float | None = _doc(None, "dropout before the head (the readout features), as the reference")
    pool_layers: tuple[int, ...] | None = _doc(None, "attention pooling before these layers; () = global")
    scorer: str | None = _doc(None, "fc (projection p), fc_hidden (p + hidden layer), gnn (small GNN)")
    scorer_input: str | None = _doc(None, "prev (previous layer's input) or curr (current features)")
    scorer_relu: bool = _doc(False, """gnn scorer: ReLU on its scores (an ablation: the reference's
        attention GNN has none on its last layer, as False)""")
    selection: str = _doc("threshold", "threshold (alpha > t), topk (keep ratio r), gao (Gao & Ji top-k)")
    threshold: float | None = _doc(None, "alpha-tilde of Eq. 3: keep nodes with alpha > threshold")
    ratio: float = _doc(0.5, "fraction of nodes kept by top-k selections")
    normalizer: str = _doc("softmax", "softmax, sparsemax or spherical (z^2 / sum z^2)")
    supervision: str = _doc("unsup", "unsup, sup (KL to GT), weak (KL to leave-one-out), gt (oracle)")
    kl_weight: float = _doc(100.0, "weight of the KL attention term")
    weak_target: str = _doc("logit", """weak supervision's y(G): raw output at the predicted class
        (reference) or its softmax probability (prob)""")
    init_dist: str | None = _doc(None, """init of p: normal, uniform, default (framework); None = reference
        (N(0,1) * init_scale for fc's p and fc_hidden's first layer, framework default for the gnn
        scorer); see INIT_REFERENCE""")
    init_scale: float = _doc(1.0, "scale of the normal / uniform initialisation of p (reference: 1)")
    epochs: int | None = _doc(None, "training epochs")
    lr_decay_epochs: tuple[int, ...] | None = _doc(None, """multiply LR by 0.1 for each epoch m listed:
        from epoch m + 1 on (lr_timing=published) or from m (early)""")
    lr_timing: str = _doc("published", """when a drop listed at epoch m applies: published (from epoch
        m + 1, after m is trained at the higher rate, as in the authors' published runs; SPEC §3)
        or early (from epoch m: ablate before issue 41, and the authors' code under today's
        torch)""")
    lr: float = _doc(1e-3, "Adam learning rate, betas (0.5, 0.999)")
    weight_decay: float = _doc(1e-4, "Adam weight decay")
    batch_size: int = _doc(32, "training batch size")
    test_batch_size: int = _doc(2000, "max graphs per evaluation batch (speed only; results per graph)")
    seeds: tuple[int, ...] = _doc((0,), "seeds trained by this trial (seed packing)")
    eval_every: int = _doc(0, "evaluate val for the curves every this many epochs; 0 = ~50 points")
    loo_auc: bool = _doc(True, "attention AUC of models without attention by leave-one-out (slow, O(N^3))")
    device: str = _doc("auto", "auto (CUDA if present), cpu or cuda (an error where CUDA is absent)")
    step: str = _doc("auto", """packed step: replay (fixed shapes; a CUDA graph on CUDA), eager (per-batch
        shapes, for debugging); auto = replay on CUDA, eager on CPU""")
    extra: tuple = field(default=(), compare=True, metadata={
        "doc": "sorted (key, value) of +new=value overrides"})

    def __post_init__(self) -> None:
        # convenience: data_params / extra may be given as dicts ({"n_train": 100})
        for name in ("data_params", "extra"):
            value = getattr(self, name)
            if isinstance(value, dict):
                object.__setattr__(self, name, tuple(sorted(value.items())))

    def replace(self, **changes) -> TrialConfig:
        return dataclasses.replace(self, **changes)

    @property
    def data_kwargs(self) -> dict:
        return dict(self.data_params)

    @property
    def has_attention(self) -> bool:
        return bool(self.pool_layers)

    @property
    def task(self) -> str:
        """'regression' (MSE on a count; accuracy of the rounded output) or 'classification'."""
        return "regression" if self.dataset in REGRESSION_DATASETS else "classification"


# Reference recipes (SPEC §3). Keys: dataset -> fields; dataset/backbone -> overrides.
_RECIPES: dict[str, dict] = {
    "colors": dict(filters=(64, 64), K=2, hidden=256, readout="sum", dropout=0.0,
                   pool_layers=(1,), scorer="fc", scorer_input="prev", epochs=100,
                   lr_decay_epochs=(90,),
                   attn_epochs=300, attn_lr_decay_epochs=(280,),
                   chebygin_ref=dict(aggregation="mean", hidden=0),  # scripts/colors.sh
                   thresholds=dict(unsup=0.03, sup=0.05, weak=0.05, gt=0.05)),
    "triangles": dict(filters=(64, 64, 64), K=7, hidden=64, readout="max", dropout=0.0,
                      pool_layers=(1, 2), scorer="gnn", scorer_input="curr", epochs=100,
                      lr_decay_epochs=(85, 95),
                      chebygin_ref=dict(aggregation="sum", hidden=64),  # scripts/triangles.sh
                      thresholds=dict(unsup=1e-4, sup=1e-3, weak=1e-2, gt=1e-3)),
    "mnist_sp": dict(filters=(4, 64, 512), K=4, hidden=64, readout="max", dropout=0.5,
                     pool_layers=(2,), scorer="fc", scorer_input="prev", epochs=30, lr_decay_epochs=(20, 25),
                     chebygin_ref=dict(aggregation="mean", hidden=0),  # scripts/mnist_75sp.sh
                     thresholds=dict(unsup=0.01, sup=0.01, weak=0.01, gt=0.01)),
    "tu": dict(filters=(64, 64, 64), K=1, hidden=0, readout="max", dropout=0.1,
               pool_layers=(1,), scorer="fc", scorer_input="prev", epochs=50, lr_decay_epochs=(25, 35, 45),
               chebygin_ref=dict(aggregation="mean", hidden=0),  # GCN-style layers
               thresholds=dict(unsup=1e-3, sup=1e-3, weak=1e-3, gt=1e-3)),
}
_RECIPE_ALIAS = {"digits_sp": "mnist_sp", "proteins": "tu", "dd": "tu", "collab": "tu"}


def recipe(dataset: str) -> dict:
    """The reference training recipe of SPEC §3 for `dataset` (any TU set by name and a user's
    PyG dataset take the TU recipe)."""
    if is_open(dataset):
        return _RECIPES["tu"]
    return _RECIPES[_RECIPE_ALIAS.get(dataset, dataset)]


def resolve(cfg: TrialConfig) -> TrialConfig:
    """Fill every `None` field from the dataset/backbone recipe (SPEC §2-3)."""
    validate_choices(cfg)
    r = recipe(cfg.dataset)
    gin_like = cfg.backbone in ("gin", "chebygin", *MLP_LAYERS)
    cheby = cfg.backbone in ("chebynet", "chebygin", "chebygin_ref")
    K = cfg.K if cfg.K is not None else (r["K"] if cheby else 1)
    if (cfg.dataset in ("collab", "dd") or is_open(cfg.dataset)) and cfg.K is None \
            and cheby:
        K = 3  # the authors' COLLAB and D&D commands: ChebyNet, -K 3 (scripts/jobs.txt)
    if cfg.backbone == "chebygin_ref":  # the dataset's reference script (SPEC §3 notes)
        agg = cfg.aggregation or r["chebygin_ref"]["aggregation"]
        hidden = cfg.hidden if cfg.hidden is not None else r["chebygin_ref"]["hidden"]
    else:  # the names mean what SPEC §2 says: GIN / ChebyGIN = sum + MLP, GCN / ChebyNet = mean
        agg = cfg.aggregation or ("sum" if gin_like else "mean")
        hidden = cfg.hidden if cfg.hidden is not None else (r["hidden"] if gin_like else 0)
    pool_layers = cfg.pool_layers if cfg.pool_layers is not None else r["pool_layers"]
    attn = bool(pool_layers)
    epochs = cfg.epochs
    decay = cfg.lr_decay_epochs
    if epochs is None:
        epochs = r.get("attn_epochs", r["epochs"]) if attn else r["epochs"]
        if decay is None:
            decay = r.get("attn_lr_decay_epochs", r["lr_decay_epochs"]) if attn \
                else r["lr_decay_epochs"]
    if decay is None:
        decay = tuple(e for e in r["lr_decay_epochs"] if e < epochs)
    scorer = cfg.scorer or r["scorer"]
    out = cfg.replace(
        K=K, aggregation=agg, hidden=hidden,
        filters=tuple(cfg.filters if cfg.filters is not None else r["filters"]),
        readout=cfg.readout or r["readout"],
        dropout=cfg.dropout if cfg.dropout is not None else r["dropout"],
        pool_layers=tuple(pool_layers),
        scorer=scorer,
        init_dist=cfg.init_dist or INIT_REFERENCE[scorer],
        scorer_input=cfg.scorer_input or r["scorer_input"],
        threshold=cfg.threshold if cfg.threshold is not None
        else r["thresholds"][cfg.supervision],
        epochs=int(epochs), lr_decay_epochs=tuple(int(e) for e in decay),
        seeds=tuple(int(s) for s in cfg.seeds),
    )
    validate(out)
    return out


def model_b_config(cfg: TrialConfig) -> TrialConfig:
    """Model B of a weak config (`ablate.trial.weak`): global pooling, unsupervised, the
    recipe's epochs and LR schedule (the attention model's own where `cfg.epochs` was set
    explicitly)."""
    r = recipe(cfg.dataset)
    explicit = cfg.epochs != r.get("attn_epochs", r["epochs"])
    return cfg.replace(pool_layers=(), supervision="unsup",
                       epochs=cfg.epochs if explicit else r["epochs"],
                       lr_decay_epochs=cfg.lr_decay_epochs if explicit else r["lr_decay_epochs"])


def lr_drops(cfg: TrialConfig) -> bool:
    """Whether a model the (resolved) trial trains drops its LR: the trial's own, or weak
    supervision's model B (`model_b_config`, the recipe's drops unless `epochs` was set).
    Where none does, `lr_timing` changes nothing that trains: `trial_id` leaves it out."""
    models = (cfg, model_b_config(cfg)) if cfg.supervision == "weak" else (cfg,)
    return any(m.lr_decay_epochs for m in models)


def axis_choices() -> dict[str, tuple]:
    """The valid values of every categorical axis (what `validate_choices` checks and
    --help lists); those of `NULLABLE_CHOICES` may also be null (the recipe's value)."""
    from ablate.data import DATASETS, OPEN_DATASETS

    return {"dataset": DATASETS + OPEN_DATASETS, "backbone": BACKBONES, "aggregation": AGGREGATIONS,
            "readout": READOUTS, "scorer": SCORERS, "scorer_input": SCORER_INPUTS,
            "selection": SELECTIONS, "normalizer": NORMALIZERS, "supervision": SUPERVISIONS,
            "init_dist": INIT_DISTS, "device": DEVICES, "step": STEPS,
            "weak_target": WEAK_TARGETS, "lr_timing": LR_TIMINGS}


NULLABLE_CHOICES = ("aggregation", "readout", "scorer", "init_dist", "scorer_input")


def validate_choices(cfg: TrialConfig) -> None:
    """Reject categorical values outside their valid sets."""
    for name, choices in axis_choices().items():
        value = getattr(cfg, name)
        if name == "dataset":  # the built-ins, tu:NAME and pyg (ablate.data.check_dataset)
            from ablate.data import check_dataset

            check_dataset(value)
            continue
        if name == "backbone" and is_object_path(value):
            continue  # a user's dense layer: `validate` builds and runs it once
        if value not in choices and not (value is None and name in NULLABLE_CHOICES):
            raise choice_error(name, value, choices)


def validate(cfg: TrialConfig) -> None:
    """Check a resolved config; raise `ConfigError` with one line naming the bad value."""
    validate_choices(cfg)
    n_layers = len(cfg.filters)
    if not (0 <= cfg.threshold < 1) or math.isnan(cfg.threshold):
        raise ConfigError(f"threshold must be in [0, 1), got {cfg.threshold}")
    if not (0 < cfg.ratio <= 1):
        raise ConfigError(f"ratio must be in (0, 1], got {cfg.ratio}")
    if cfg.K < 1:
        raise ConfigError(f"K must be >= 1, got {cfg.K}")
    if (cfg.backbone in ("gcn", "gin") or is_dense(cfg.backbone)) and cfg.K != 1:
        raise ConfigError(f"backbone {cfg.backbone} has K = 1, got K={cfg.K}; "
                          "use chebynet or chebygin for K > 1")
    _check_dense(cfg)
    if n_layers < 1 or any(f < 1 for f in cfg.filters):
        raise ConfigError(f"filters must be positive layer widths, got {cfg.filters}")
    bad = [p for p in cfg.pool_layers if not 0 <= p <= n_layers]
    if bad or len(set(cfg.pool_layers)) != len(cfg.pool_layers):
        raise ConfigError(f"pool_layers must be distinct layer indices in 0..{n_layers} "
                          f"(pooling before that layer; {n_layers} = after the last), got "
                          f"{cfg.pool_layers}")
    if cfg.scorer_input == "prev" and 0 in cfg.pool_layers:
        raise ConfigError("scorer_input=prev needs pooling after a layer (pool_layers >= 1)")
    if cfg.supervision != "unsup" and not cfg.pool_layers:
        raise ConfigError(f"supervision={cfg.supervision} needs attention: set pool_layers")
    if cfg.supervision in ("sup", "gt") and (cfg.dataset in TU_DATASETS
                                              or cfg.dataset.startswith("tu:")):
        raise ConfigError(f"supervision={cfg.supervision} needs ground-truth attention, which "
                          f"dataset {cfg.dataset} does not have; use weak (leave-one-out "
                          "targets) or unsup")
    if cfg.step == "replay" and cfg.selection == "gao":
        raise ConfigError("step=replay needs fixed shapes, but selection=gao (Gao & Ji top-k, "
                          "PyG TopKPooling) has data-dependent shapes; use step=auto or eager")
    _check_ranges(cfg)
    if not cfg.seeds:
        raise ConfigError("seeds must name at least one seed")


def _check_dense(cfg: TrialConfig) -> None:
    """A dense backbone: `hidden` only where the layer has an MLP; a user's layer imports,
    builds and runs once on a tiny batch (`ablate.models.backbones.check_layer`)."""
    if not is_dense(cfg.backbone):
        return
    if cfg.hidden and cfg.backbone not in MLP_LAYERS:
        raise ConfigError(f"hidden={cfg.hidden} applies to the paper's layers and to "
                          f"{', '.join(MLP_LAYERS)}; backbone {cfg.backbone} has no MLP (hidden=0)")
    if is_object_path(cfg.backbone):
        check_layer(cfg.backbone)


# field -> (test, what is valid): every numeric axis is checked before anything runs
_RANGES: dict[str, tuple] = {
    "lr": (lambda v: v > 0, "> 0"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "epochs": (lambda v: v >= 1, ">= 1"),
    "batch_size": (lambda v: v >= 1, ">= 1"),
    "test_batch_size": (lambda v: v >= 1, ">= 1"),
    "kl_weight": (lambda v: v >= 0, ">= 0"),
    "init_scale": (lambda v: v > 0, "> 0"),
    "dropout": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "hidden": (lambda v: v >= 0, ">= 0 (0 = no hidden layer)"),
    "eval_every": (lambda v: v >= 0, ">= 0 (0 = about 50 points)"),
}


def _check_ranges(cfg: TrialConfig) -> None:
    """Every numeric field in its valid range, or one line naming the field and the range."""
    for name, (ok, valid) in _RANGES.items():
        v = getattr(cfg, name)
        if v is None:
            continue
        if (isinstance(v, float) and not math.isfinite(v)) or not ok(v):
            raise ConfigError(f"{name} must be {valid}, got {v}")
    bad = [e for e in cfg.lr_decay_epochs if e < 1]
    if bad:
        raise ConfigError(f"lr_decay_epochs must be epochs >= 1, got {cfg.lr_decay_epochs}")


def inapplicable(cfg: TrialConfig) -> set[str]:
    """Axes whose value does not change this (resolved) trial: shown blank in trial tables."""
    out = set()
    if not cfg.pool_layers:  # global pooling: no attention
        out |= {"scorer", "scorer_input", "selection", "threshold", "ratio", "normalizer",
                "kl_weight", "init_dist", "init_scale", "supervision"}
    elif cfg.selection == "threshold":
        out.add("ratio")
    else:
        out.add("threshold")
    if cfg.supervision in ("unsup", "gt"):
        out.add("kl_weight")
    if cfg.supervision != "weak" and (cfg.pool_layers or not cfg.loo_auc):
        out.add("weak_target")
    if cfg.selection == "gao":
        out |= {"normalizer", "scorer", "scorer_input"}
    if not cfg.pool_layers or cfg.selection == "gao" or cfg.scorer != "gnn":
        out.add("scorer_relu")
    if is_dense(cfg.backbone):  # K is 1; aggregation is the gnn scorer's only
        out.add("K")
        if "scorer_relu" in out:
            out.add("aggregation")
        if cfg.backbone not in MLP_LAYERS:
            out.add("hidden")
    return out


def axes(cfg: TrialConfig) -> dict:
    """The config as flat, Parquet-friendly columns (tuples become comma strings)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name in ("data_params", "extra"):
            v = json.dumps(dict(v), sort_keys=True, default=str)
        elif isinstance(v, tuple):
            v = ",".join(str(x) for x in v)
        out[f.name] = v
    return out


def trial_id(cfg: TrialConfig, dataset_hash: str) -> str:
    """Hash of the resolved config (minus study, device, step) plus the dataset recipe hash.

    Device and step change float rounding only, so a trial keeps its id (and its stored
    result) wherever and however it ran; so does the mirror its raw files came from
    (``data.url``; ``data.path`` stays hashed, as it always was). An axis or data parameter
    of `CHANGED_DEFAULTS` at its earlier value is left out, so adding an axis or changing a
    default does not rename the trials stored before it (their data recipes hash as before:
    `ablate.data.recipe_key`). A trial with dropout also hashes `DROPOUT_RNG`, the way its
    masks are drawn.
    """
    earlier_data = CHANGED_DEFAULTS["data"]
    a = axes(cfg)
    for k in EXECUTION_FIELDS:
        a.pop(k)
    dropped = {k for k, v in cfg.data_params if k == "url" or earlier_data.get(k) == v}
    if dropped:  # a mirror of checksummed files (new key), data of before: not identity
        a["data_params"] = json.dumps({k: v for k, v in cfg.data_params if k not in dropped},
                                      sort_keys=True, default=str)
    for k, before in CHANGED_DEFAULTS["axes"].items():
        if a[k] == before:
            del a[k]
    if not lr_drops(cfg):  # no drop: its timing changes nothing that trains
        a.pop("lr_timing", None)
    if (a.get("dropout") or 0) > 0:
        a["dropout_rng"] = DROPOUT_RNG
    blob = json.dumps({"cfg": a, "data": dataset_hash}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
