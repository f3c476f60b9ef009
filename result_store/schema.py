"""The declared Parquet schema of the result store: one column list, one schema per trial kind.

`COLUMNS` names every column a trial file (`trials/<id>.parquet`, one row per seed and split)
or a curves file (`curves/<id>.parquet`, one row per seed and evaluated epoch) may hold,
with its Arrow type, whether it may be null, the trial kinds that have it and its meaning.
A name has one type in every kind. Per-layer metrics are families (`attn_auc_l{k}`): a file
holds layers 0 .. n-1, n the most its rows need (at least 1).

`table(rows, kind, part)` builds a file's table: every column of the kind's schema, typed,
in declared order; a column a row lacks is a typed null. A row that does not fit raises
`SchemaError` naming the column. The schema's metadata carries the kind, the part and
`VERSION` (`result_store.writer` puts it in the file's footer); a file without it was
written before the schema (version 0, `result_store.legacy`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from result_store.encodings import native_value

# The schema version this code writes and reads (and every version below it). v2 added the
# GPU provenance columns (`since=2`); a v1 file lacks them and reads with them null. v3 added
# `git_dirty` (`since=3`), v4 `dataset_source` (`since=4`), v5 `cpu_capability` (`since=5`).
VERSION = 5
META_VERSION, META_KIND, META_PART = b"ablate.schema_version", b"ablate.kind", b"ablate.part"
KINDS = ("graph", "sdc")
PARTS = ("trials", "curves")

_S, _I, _F, _B = pa.string(), pa.int64(), pa.float64(), pa.bool_()
# lists name their item "element", as Parquet's nested-type convention (and a read) does
ACC_BY_SIZE = pa.list_(pa.field("element", pa.struct([
    pa.field("lo", _I), pa.field("hi", _I), pa.field("accuracy", _F), pa.field("graphs", _I)])))
MASS_CURVE = pa.list_(pa.field("element", pa.struct([pa.field("t", _F),
                                                     pa.field("fraction", _F)])))
TYPE_NAMES = {"string": _S, "int64": _I, "double": _F, "bool": _B}  # for kinds' own columns


class SchemaError(ValueError):
    """Rows that do not fit the declared schema; the message names the column."""


@dataclass(frozen=True)
class Column:
    """One declared column (`name` with ``{k}``: a family, one column per pooling layer)."""

    name: str
    type: pa.DataType
    meaning: str
    kinds: tuple[str, ...] = KINDS
    part: str = "trials"
    nullable: bool = True
    since: int = 1  # the schema version that added the column (older files lack it)

    @property
    def per_layer(self) -> bool:
        return "{k}" in self.name


_G, _D = ("graph",), ("sdc",)


def _c(name: str, type_: pa.DataType, meaning: str, kinds: tuple[str, ...] = KINDS,
       nullable: bool = True, part: str = "trials", since: int = 1) -> Column:
    return Column(name, type_, meaning, kinds, part, nullable, since)


_curve = functools.partial(_c, part="curves")


COLUMNS: tuple[Column, ...] = (
    # identity: every row has it
    _c("study", _S, "study name", nullable=False),
    _c("trial_id", _S, "12 hex digits: hash of the resolved config and the dataset recipe "
       "(search studies: `ARM-trialNNNNN`, `ARM-final-ID`)", nullable=False),
    _c("seed", _I, "the seed of this row (a trial may hold several)", nullable=False),
    _c("split", _S, "`val`, `test_orig`, `test_large`, `test_largec` (COLORS), `test_noisy`, "
       "`test_noisyc` (MNIST)", nullable=False),
    _c("status", _S, "`ok`, `error` (raised, or its worker died) or `nan` (non-finite "
       "training loss)", nullable=False),
    _c("error", _S, "one line: exception and where, Ray's reason for a lost worker, or empty",
       nullable=False),
    _c("attempt", _I, "1 for a first try; n for the n-th try that produced these rows",
       nullable=False),
    _c("pack_id", _S, "the Ray trial (pack) that trained this trial"),
    _c("pack_trials", _I, "trials in that pack (1: alone)"),
    _c("batched_seeds", _I, "members trained as one model with this seed (1: sequential)", _G),
    # config axes, as the trial id hashes them
    _c("dataset", _S, "dataset name (SDC: `sdc_` + task)"),
    _c("data_params", _S, "dataset recipe overrides, JSON text of the sorted pairs (an "
       "identity label: values of any type)"),
    _c("task", _S, "SDC task: synthetic_linear, synthetic_nonlinear, synthetic_k6, digits, "
       "cifar", _D),
    _c("backbone", _S, "gcn, gin, chebynet, chebygin, chebygin_ref", _G),
    _c("K", _I, "Chebyshev scales", _G),
    _c("aggregation", _S, "mean or sum", _G),
    _c("hidden", _I, "hidden width of the per-layer MLP (0 = single Linear+ReLU)", _G),
    _c("filters", _S, "output channels per graph layer, comma-separated (\"64,64\")", _G),
    _c("readout", _S, "sum, mean or max over nodes", _G),
    _c("dropout", _F, "dropout before the head", _G),
    _c("pool_layers", _S, "attention pooling before these layers, comma-separated "
       "(\"\" = global pooling)", _G),
    _c("scorer", _S, "fc, fc_hidden or gnn", _G),
    _c("scorer_input", _S, "prev or curr", _G),
    _c("scorer_relu", _B, "gnn scorer: ReLU on its scores", _G),
    _c("selection", _S, "threshold, topk or gao", _G),
    _c("threshold", _F, "keep nodes with alpha > threshold", _G),
    _c("ratio", _F, "fraction of nodes kept by top-k selections", _G),
    _c("normalizer", _S, "attention normaliser (graph: softmax, sparsemax, spherical; SDC "
       "also softmax_entropy, hard)"),
    _c("entropy_lambda", _F, "weight of H(alpha) in the loss (softmax_entropy)", _D),
    _c("average_at", _S, "input or hidden: where the classifier averages", _D),
    _c("focus_hidden", _S, "hidden widths of the focus net, comma-separated", _D),
    _c("classify_hidden", _S, "hidden widths of the classifier, comma-separated", _D),
    _c("supervision", _S, "unsup, sup, weak or gt", _G),
    _c("kl_weight", _F, "weight of the KL attention term", _G),
    _c("weak_target", _S, "weak supervision's y(G): logit or prob", _G),
    _c("init_dist", _S, "init of p: default, normal or uniform", _G),
    _c("init_scale", _F, "scale of the initialisation of p", _G),
    _c("epochs", _I, "training epochs"),
    _c("lr_decay_epochs", _S, "epochs where the LR is multiplied by 0.1, comma-separated", _G),
    _c("lr_timing", _S, "when a listed LR drop applies: published (from the next epoch) or "
       "early (from the listed one)", _G),
    _c("lr", _F, "Adam learning rate"),
    _c("weight_decay", _F, "Adam weight decay"),
    _c("batch_size", _I, "training batch size"),
    _c("test_batch_size", _I, "evaluation batch size (speed only)"),
    _c("seeds", _S, "the trial's seeds, comma-separated (\"0,1\")"),
    _c("eval_splits", _S, "splits evaluated, comma-separated", _D),
    _c("eval_every", _I, "curve point every this many epochs (0 = default)"),
    _c("loo_auc", _B, "attention AUC of global-pool models by leave-one-out", _G),
    _c("device", _S, "the device used"),
    _c("step", _S, "auto, replay or eager", _G),
    _c("extra", _S, "JSON text of the `+new=value` axes", _G),
    # metrics
    _c("accuracy", _F, "fraction correct (rounded count for COLORS/TRIANGLES)"),
    _c("loss", _F, "task loss on the split"),
    _c("n_graphs", _I, "graphs in the split", _G),
    _c("n_mosaics", _I, "mosaics in the split", _D),
    _c("ft", _F, "fraction of graphs (mosaics) whose top attention is on a ground-truth node "
       "(the foreground segment)"),
    _c("cos_p_init", _F, "cosine of the initial projection p with p_opt (COLORS; else NaN)", _G),
    _c("nnz", _F, "mean fraction of segments with alpha > 0.01", _D),
    _c("dist", _F, "distance of alpha to the nearest one-hot vector", _D),
    _c("ent", _F, "entropy of alpha", _D),
    _c("ftpt", _F, "fraction of mosaics with focus true, prediction true", _D),
    _c("ffpt", _F, "fraction with focus false, prediction true", _D),
    _c("ftpf", _F, "fraction with focus true, prediction false", _D),
    _c("ffpf", _F, "fraction with focus false, prediction false", _D),
    _c("acc_by_size", ACC_BY_SIZE, "accuracy per graph-size bin: nodes lo..hi (inclusive), "
       "accuracy, graphs in the bin (non-empty bins only)", _G),
    _c("gt_mass_curve", MASS_CURVE, "fraction of graphs (mosaics) whose attention mass on "
       "ground-truth nodes is >= t, for t = 0.05 .. 0.95 (null: no attention)"),
    _c("attn_auc_l{k}", _F, "attention ROC AUC of pooling layer k (global-pool models: "
       "leave-one-node-out attention, `_l0`)", _G),
    _c("ratio_kept_l{k}", _F, "mean fraction of nodes kept by pooling layer k", _G),
    _c("attn_auc_pooled_l{k}", _F, "attention AUC of layer k over all nodes of the seed's "
       "test splits together, as the papers report it", _G),
    # search studies (Optuna through Ray Tune)
    _c("search_arm", _S, "search studies: the arm", _G),
    _c("role", _S, "search studies: search, tuned or a baseline's name", _G),
    _c("optuna_trial", _I, "search studies: the Optuna trial number (-1: none)", _G),
    _c("pruned", _B, "search studies: stopped early by the scheduler", _G),
    _c("epochs_run", _I, "search studies: epochs trained before the trial ended", _G),
    _c("objective", _F, "search studies: the objective reported to Optuna", _G),
    _c("fold", _I, "search studies: cross-validation fold of the row", _G),
    # cost and provenance
    _c("train_s", _F, "seconds training this seed"),
    _c("eval_s", _F, "seconds evaluating this split"),
    _c("peak_rss_mb", _F, "peak resident memory of the worker process during this trial (MB; "
       "counted from the trial's start where Linux can reset it)", _G),
    _c("trial_s", _F, "seconds inside the trial function (all seeds of the trial)"),
    _c("started_at", _F, "Unix time the attempt started on the worker"),
    _c("finished_at", _F, "Unix time the attempt finished on the worker"),
    _c("node", _S, "the worker's IP"),
    _c("node_id", _S, "the worker's Ray node id"),
    _c("gpu_ids", _S, "GPU ids Ray assigned, comma-separated (\"\" = none)"),
    _c("dataset_hash", _S, "hash of the dataset recipe"),
    _c("dataset_source", _S, "the downloaded zip a TU set's files came from, 'sha256:HEX' "
       "(with ' (first use)' where no published sum checked it: recorded when fetched); \"\" "
       "for generated data or files put in place by hand", ("graph",), since=4),
    _c("git_sha", _S, "commit of the trainer's checkout"),
    _c("git_dirty", _S, "\"\" for a clean checkout; else 'dirty:' and a hash of its uncommitted "
       "diff (the code that ran is not the commit)", since=3),
    _c("torch_version", _S, "torch version of the trainer"),
    _c("pyg_version", _S, "torch_geometric version of the trainer"),
    _c("host", _S, "the trainer's host name"),
    _c("cpu_capability", _S, "the vector unit torch's CPU kernels used on the trainer's host "
       "(`torch.backends.cpu.get_cpu_capability()`: AVX2, AVX512, DEFAULT, ...; a CUDA trial "
       "names its host's): CPU results are bit-identical only on the same one", since=5),
    _c("gpu_name", _S, "the GPU the trial trained on (\"\" = a CPU)", since=2),
    _c("cuda_version", _S, "CUDA version of the trainer's torch build (\"\" = a CPU)", since=2),
    _c("gpu_driver", _S, "NVIDIA driver version (\"\" = a CPU, or nvidia-smi absent)",
       since=2),
    _c("peak_gpu_mb", _F, "peak GPU memory allocated by the trial's tensors, whole pack (MB; "
       "null on a CPU)", since=2),
    _c("created_at", _S, "when the driver wrote the file (UTC ISO)"),
    _c("ray_version", _S, "Ray version of the driver"),
    # curves
    _curve("study", _S, "study name", nullable=False),
    _curve("trial_id", _S, "the trial", nullable=False),
    _curve("attempt", _I, "the attempt that produced the curve", nullable=False),
    _curve("seed", _I, "the seed", nullable=False),
    _curve("epoch", _I, "the epoch (1-based) after which the point was taken", nullable=False),
    _curve("train_loss", _F, "mean training loss of the epoch"),
    _curve("train_accuracy", _F, "accuracy on the training mosaics", _D),
    _curve("val_accuracy", _F, "validation accuracy"),
    _curve("val_loss", _F, "validation loss", _G),
    _curve("val_auc", _F, "validation attention AUC of the first pooling layer (NaN without "
           "attention)", _G),
    _curve("val_ft", _F, "validation FT", _D),
    _curve("ftpt", _F, "training mosaics: focus true, prediction true", _D),
    _curve("ffpt", _F, "training mosaics: focus false, prediction true", _D),
    _curve("ftpf", _F, "training mosaics: focus true, prediction false", _D),
    _curve("ffpf", _F, "training mosaics: focus false, prediction false", _D),
)

_FAMILY = re.compile(r"^(.+)_l(\d+)$")
_BY_NAME = {(c.part, c.name): c for c in COLUMNS}
NESTED = tuple(c.name for c in COLUMNS if pa.types.is_nested(c.type))


def columns(kind: str, part: str = "trials") -> list[Column]:
    """The declared columns of `kind`'s `part` file ("trials" or "curves"), in file order."""
    if kind not in KINDS or part not in PARTS:
        raise SchemaError(f"no declared schema for kind {kind!r}, part {part!r}; kinds: "
                          f"{', '.join(KINDS)}; parts: {', '.join(PARTS)}")
    return [c for c in COLUMNS if c.part == part and kind in c.kinds]


def column(name: str, part: str = "trials") -> Column | None:
    """The declared column of `name` (a family's member, such as `attn_auc_l3`, included)."""
    got = _BY_NAME.get((part, name))
    if got is None and (m := _FAMILY.match(name)):
        got = _BY_NAME.get((part, m.group(1) + "_l{k}"))
    return got


def layer(name: str) -> int | None:
    """k of a per-layer column name (`ratio_kept_l1` -> 1); None for other names."""
    m = _FAMILY.match(name)
    return int(m.group(2)) if m and column(name) is not None else None


def schema(kind: str, part: str = "trials", layers: int = 1,
           extra: Mapping[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of one file: `kind`'s columns (families for layers 0 .. `layers`-1),
    then `extra` (a kind's own columns: name -> a `TYPE_NAMES` key), with the metadata."""
    fields = []
    for c in columns(kind, part):
        names = [c.name.format(k=k) for k in range(layers)] if c.per_layer else [c.name]
        fields += [pa.field(n, c.type, c.nullable) for n in names]
    for name, type_name in (extra or {}).items():
        if column(name, part) is not None or type_name not in TYPE_NAMES:
            raise SchemaError(f"kind column {name!r} ({type_name}): a declared name, or not one "
                              f"of the types {', '.join(TYPE_NAMES)}")
        fields.append(pa.field(name, TYPE_NAMES[type_name]))
    return pa.schema(fields, metadata={META_KIND: kind.encode(), META_PART: part.encode(),
                                       META_VERSION: str(VERSION).encode()})


def table(rows: Sequence[Mapping], kind: str, part: str = "trials",
          extra: Mapping[str, str] | None = None) -> pa.Table:
    """`rows` as a table of `kind`'s declared schema; `SchemaError` names a column that does not
    fit (undeclared, null where required, or a value of another type). A nested column
    (`NESTED`) also takes its version-0 encodings (JSON text, `result_store.legacy`)."""
    names = set().union(*rows) if rows else set()
    extra = dict(extra or {})
    unknown = sorted(n for n in names if n not in extra and not _declared(n, kind, part))
    if unknown:
        raise SchemaError(f"column {unknown[0]!r} is not in the declared {kind} {part} schema "
                          f"(result_store/schema.py){_more(unknown)}")
    layers = 1 + max((layer(n) for n in names if layer(n) is not None), default=0)
    sch = schema(kind, part, layers, extra)
    arrays = []
    for f in sch:
        values = [r.get(f.name) for r in rows]
        if f.name in NESTED:
            try:
                values = [native_value(f.name, v) for v in values]
            except ValueError as e:
                raise SchemaError(f"column {f.name!r}: {e}") from None
        if not f.nullable and any(v is None for v in values):
            i = next(i for i, v in enumerate(values) if v is None)
            raise SchemaError(f"column {f.name!r} is required ({f.type}) but row {i} has none")
        try:
            arrays.append(pa.array(values, type=f.type, from_pandas=False))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SchemaError(f"column {f.name!r} does not fit the declared type {f.type}: "
                              f"{first}") from None
    return pa.Table.from_arrays(arrays, schema=sch)


def _declared(name: str, kind: str, part: str) -> bool:
    c = column(name, part)
    return c is not None and kind in c.kinds


def _more(names: list[str]) -> str:
    return f" (also {', '.join(map(repr, names[1:4]))}{', ...' if len(names) > 4 else ''})" \
        if len(names) > 1 else ""


def version_of(sch: pa.Schema) -> int | None:
    """The schema version a file declares; 0 when it declares none (written before the
    schema); None when its declaration is not a version number (not ours)."""
    meta = sch.metadata or {}
    if META_VERSION not in meta:
        return 0
    try:
        v = int(meta[META_VERSION])
    except ValueError:
        return None
    return v if v >= 1 else None


def kind_of(sch: pa.Schema) -> tuple[str, str] | None:
    """(kind, part) a versioned file declares, or None."""
    meta = sch.metadata or {}
    try:
        return meta[META_KIND].decode(), meta[META_PART].decode()
    except (KeyError, UnicodeDecodeError):
        return None


def mismatches(sch: pa.Schema, part: str) -> list[str]:
    """Columns of a versioned file whose type is not the declared one ('name: got, declared')."""
    out = []
    for f in sch:
        c = column(f.name, part)
        if c is not None and f.type != c.type:
            out.append(f"{f.name}: {f.type}, declared {c.type}")
    return out

