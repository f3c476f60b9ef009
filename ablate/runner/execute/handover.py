"""The hand-over to Ray Tune: each pack as a small, fixed-size trial description.

Tune copies what it is handed once per trial it creates, and a grid of full payloads
(`tune.grid_search`) is copied whole for every one of its values: start-up grew with the
square of the number of trials. Here Tune sees, per Ray trial, only its description
(`describe`: the pack's index, id and resources, a few dozen bytes whatever the pack
holds), suggested one at a time by `PackFeed`, a Tune searcher, as Tune has room for
more; so Tune's start-up and memory grow linearly and the first trial starts at once.

The payloads (each member's pickled config, the dataset recipe, the retry settings)
travel through Ray's object store once, in pieces of at most `PACKS_PER_PIECE` packs
(`PayloadTable`); a worker fetches the piece that holds its pack and keeps the last few
it fetched, so a warm worker running packs in order fetches each piece once.

This module imports Ray Tune when it is imported (`PackFeed` is a Tune searcher): the
driver imports it only after Ray's environment is set (`ablate.runner.execute.ray_env`).
"""

from __future__ import annotations

import bisect
import pickle
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

if TYPE_CHECKING:
    from ablate.runner.plan.packing import Pack

PACKS_PER_PIECE = 256  # packs per object-store piece of the payload table
PIECE_BYTES = 4 << 20  # a piece closes early once its payloads reach this many bytes
KEEP_PIECES = 4  # pieces a worker process keeps after fetching them

_PIECES: OrderedDict[str, list] = OrderedDict()  # per worker process: piece id -> payloads


def describe(packs: list[Pack], resources: dict[str, dict]) -> list[dict]:
    """What Tune gets per Ray trial: the pack's index in the payload table, its id (trial
    names, the store callback) and the resources it asks of Ray."""
    return [{"index": i, "trial_id": pk.pack_id, "resources": dict(resources[pk.pack_id])}
            for i, pk in enumerate(packs)]


class PayloadTable:
    """Every pack's payload, in object-store pieces; `get(index)` on a worker.

    Pickles as its pieces' ObjectRefs and first indices only (a few KB for ten thousand
    packs), so handing it to each trial costs no more with more trials."""

    def __init__(self, pieces: list, starts: list[int], count: int):
        self.pieces, self.starts, self.count = pieces, starts, count

    @classmethod
    def put(cls, payloads: list[dict], packs_per_piece: int | None = None,
            piece_bytes: int | None = None) -> PayloadTable:
        """Put `payloads` (in pack order) into Ray's object store in pieces of at most
        `packs_per_piece` packs or about `piece_bytes` bytes (needs Ray)."""
        import ray

        packs_per_piece = packs_per_piece or PACKS_PER_PIECE
        piece_bytes = piece_bytes or PIECE_BYTES
        pieces, starts, current, size = [], [], [], 0
        for i, p in enumerate(payloads):
            if not current:
                starts.append(i)
            current.append(p)
            size += _bytes(p)
            if len(current) >= packs_per_piece or size >= piece_bytes:
                pieces.append(ray.put(current))
                current, size = [], 0
        if current:
            pieces.append(ray.put(current))
        return cls(pieces, starts, len(payloads))

    def __len__(self) -> int:
        return self.count

    def piece_of(self, index: int) -> int:
        """The piece that holds pack `index`."""
        if not 0 <= index < self.count:
            raise IndexError(f"pack {index} is not in a table of {self.count}")
        return bisect.bisect_right(self.starts, index) - 1

    def get(self, index: int) -> dict:
        """The payload of pack `index`: its piece fetched once per worker process (the last
        `KEEP_PIECES` pieces kept)."""
        import ray

        k = self.piece_of(index)
        ref = self.pieces[k]
        key = ref.hex()
        piece = _PIECES.get(key)
        if piece is None:
            piece = _PIECES[key] = ray.get(ref)
            while len(_PIECES) > KEEP_PIECES:
                _PIECES.popitem(last=False)
        else:
            _PIECES.move_to_end(key)
        return piece[index - self.starts[k]]


def _bytes(payload: dict) -> int:
    """About the bytes a payload takes: its pickled member configs, plus a little."""
    return 256 + sum(len(m.get("config", b"")) for m in payload.get("members", ()))


def feed(descriptions: list[dict], concurrency: int):
    """Tune's search algorithm for the packs: `PackFeed`, with at most `concurrency`
    Ray trials suggested and not yet finished (what Tune keeps pending too)."""
    return ConcurrencyLimiter(PackFeed(descriptions), max_concurrent=max(1, concurrency))


def concurrency(slots: int, embedded: bool) -> int:
    """Ray trials Tune may hold at once (running or waiting for a worker). On an embedded
    Ray, its trial slots: a finished trial leaves its warm worker to the next one, which
    Tune creates at its next step, while each trial more would have Tune ask Ray for a new
    worker and drop it when a warm one frees first. On a cluster at least 200 (Tune's own
    default), so an autoscaler sees the demand."""
    return slots if embedded else max(200, 2 * slots)


class PackFeed(Searcher):
    """A Tune searcher that suggests the packs' descriptions in order, one per call, and
    says it is finished after the last: Tune asks for the next when it has room for it."""

    def __init__(self, descriptions: list[dict]):
        super().__init__()
        self.descriptions = descriptions
        self.next = 0

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.next >= len(self.descriptions):
            return self.FINISHED
        d = self.descriptions[self.next]
        self.next += 1
        return {"trial": d}

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        return None

    def save(self, checkpoint_path: str) -> None:
        """Tune's experiment checkpoints keep only the position (the store is what a rerun
        resumes from)."""
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"next": self.next}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.next = pickle.load(f)["next"]


class InOrder(FIFOScheduler):
    """Tune's first-in-first-out scheduling without its rescan: `FIFOScheduler` looks through
    every trial Tune holds for the first one waiting at each step of Tune's loop, work that
    grows with the trials already finished; this one keeps the trials added and not yet
    started in a queue. (A trial Tune retries after its worker died is started from Tune's
    own list of waiting trials, as any trial no scheduler picks.)"""

    def __init__(self):
        super().__init__()
        self._waiting: deque = deque()

    def on_trial_add(self, tune_controller, trial: Trial) -> None:
        self._waiting.append(trial)

    def choose_trial_to_run(self, tune_controller) -> Trial | None:
        while self._waiting and self._waiting[0].status != Trial.PENDING:
            self._waiting.popleft()
        return self._waiting[0] if self._waiting else None


# Tune's experiment checkpoints (every trial's state, written every 10 s or more) are not
# what a rerun resumes from (the store is), and their cost grows with the trials: one at
# the end is enough.
TUNE_ENV = {"TUNE_GLOBAL_CHECKPOINT_S": str(10 ** 9)}
