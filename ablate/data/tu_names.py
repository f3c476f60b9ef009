"""The names of the TU collection of graph classification benchmarks (Morris et al. 2020,
"TUDataset: A collection of benchmark datasets for learning with graphs"), as its site lists
them: what `dataset=tu:NAME` accepts without a `data.path` (a name outside the list reads
the user's own TU-format files from `data.path`).

Names are case-sensitive, as the site's file names (`NCI1.zip`, `IMDB-BINARY.zip`).
"""

from __future__ import annotations

from ablate.errors import ConfigError, did_you_mean

PREFIX = "tu:"  # dataset=tu:NAME

# The collection by the site's groups (graph classification; regression sets such as QM9,
# ZINC and alchemy are left out: the recipe trains a classifier).
TU_NAMES: tuple[str, ...] = (
    # small molecules
    "AIDS", "BZR", "BZR_MD", "COX2", "COX2_MD", "DHFR", "DHFR_MD", "ER_MD", "FRANKENSTEIN",
    "MCF-7", "MCF-7H", "MOLT-4", "MOLT-4H", "Mutagenicity", "MUTAG", "NCI1", "NCI109",
    "NCI-H23", "NCI-H23H", "OVCAR-8", "OVCAR-8H", "P388", "P388H", "PC-3", "PC-3H", "PTC_FM",
    "PTC_FR", "PTC_MM", "PTC_MR", "SF-295", "SF-295H", "SN12C", "SN12CH", "SW-620", "SW-620H",
    "Tox21_AhR_training", "Tox21_AR_training", "Tox21_AR-LBD_training", "Tox21_ARE_training",
    "Tox21_aromatase_training", "Tox21_ATAD5_training", "Tox21_ER_training",
    "Tox21_ER-LBD_training", "Tox21_HSE_training", "Tox21_MMP_training", "Tox21_p53_training",
    "Tox21_PPAR-gamma_training", "UACC257", "UACC257H", "Yeast", "YeastH",
    # bioinformatics
    "DD", "ENZYMES", "KKI", "OHSU", "Peking_1", "PROTEINS", "PROTEINS_full",
    # computer vision
    "COIL-DEL", "COIL-RAG", "Cuneiform", "Fingerprint", "FIRSTMM_DB", "Letter-high",
    "Letter-low", "Letter-med", "MSRC_9", "MSRC_21", "MSRC_21C",
    # social networks
    "COLLAB", "dblp_ct1", "dblp_ct2", "DBLP_v1", "deezer_ego_nets", "facebook_ct1",
    "facebook_ct2", "github_stargazers", "highschool_ct1", "highschool_ct2", "IMDB-BINARY",
    "IMDB-MULTI", "infectious_ct1", "infectious_ct2", "mit_ct1", "mit_ct2", "REDDIT-BINARY",
    "REDDIT-MULTI-5K", "REDDIT-MULTI-12K", "reddit_threads", "tumblr_ct1", "tumblr_ct2",
    "twitch_egos", "TWITTER-Real-Graph-Partial",
    # synthetic
    "COLORS-3", "SYNTHETIC", "SYNTHETICnew", "Synthie", "TRIANGLES",
)


def is_tu(dataset: object) -> bool:
    """Whether `dataset` names a TU set by the `tu:` prefix."""
    return isinstance(dataset, str) and dataset.startswith(PREFIX)


def tu_name(dataset: str) -> str:
    """The TU name of `tu:NAME` (one ConfigError line when it is empty or not a plain name)."""
    name = dataset[len(PREFIX):]
    if not name or any(c in name for c in "/\\: ") or name.startswith("."):
        raise ConfigError(f"dataset {dataset!r}: give a TU name after 'tu:', e.g. tu:NCI1 "
                          f"(the names: {PREFIX}NAME with NAME one of the TU collection's)")
    return name


def check_tu_name(name: str, path: str | None) -> None:
    """An unknown TU name is refused with the closest known one, unless `path` (data.path)
    names the user's own files."""
    if name in TU_NAMES or path is not None:
        return
    raise ConfigError(f"unknown TU data set {name!r} (not in the TU collection's list)"
                      f"{did_you_mean(name, TU_NAMES, PREFIX)}; for your own TU-format files "
                      f"set data.path= to their folder")
