"""Scenarios: how each version's training set relates to its parent's (UniBCT Table 1, BCT, CL2R).

Each scenario is a pydantic params model plus a pure function ``assign`` that, given the training
pool (classes in a seeded random order, and each class's items in a seeded random order), returns
one training set per version name: the items it holds and its class order. A class order lists
classes in the order they were introduced, so a child that extends its parent's classes keeps the
parent's class indices as a prefix (the fixed d-Simplex head relies on that).

Each scenario also *declares* what its training sets promise, as data: ``relations()`` returns
typed ``Relation`` objects (sets disjoint, nested or equal in classes or items, class-order
prefixes, class counts, items per class, replay memory). The split's data expectations are
generated from these declarations, one translation per relation kind (``compat.data.suite``,
validated by ``compat.data.expectations``), so a scenario states its contract once, next to
``assign``.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from compat.names import Name

Pool = dict[
    str, list[str]
]  # class -> its item ids, in a seeded random order; dict order = class order
TrainSets = dict[str, tuple[list[str], list[str]]]  # name -> (item ids, class order)


def _take(n: int, frac: float) -> int:
    """How many of n to keep for a fraction: at least one, at most n."""
    return min(n, max(1, round(n * frac)))


# ---- The relation vocabulary -------------------------------------------------------------------
# Relations name training sets by their manifest name. Set relations compare the sets' classes (the
# manifest's class list) or items; counts are checked against the source: the training pool's
# class count, and each class's item count (the pool holds every source item of its classes).

Unit = Literal["classes", "items"]


class Share(BaseModel):
    """A part of n things, cut the way ``assign`` cuts: ``fraction`` of them rounded as ``_take``
    rounds (at least one, at most n), leaving at least ``spare`` out and keeping at most
    ``most``; with ``rest``, what that part leaves over. The default is all of them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    fraction: float = Field(1.0, gt=0.0, le=1.0)
    spare: int = Field(0, ge=0)
    most: int | None = Field(None, ge=0)  # 0: none (a replay memory of 0 images)
    rest: bool = False

    def of(self, n: int) -> int:
        """How many of n this share holds."""
        k = min(_take(n, self.fraction), n - self.spare)
        if self.most is not None:
            k = min(k, self.most)
        return n - k if self.rest else k

    def __str__(self) -> str:
        part = "all" if self.fraction == 1.0 else f"{self.fraction * 100:g}%"
        if self.most is not None:
            part += f" (at most {self.most})"
        if self.spare:
            part += f" (at least {self.spare} left out)"
        return f"what {part} leaves" if self.rest else part


class Relation(BaseModel):
    """One promise a scenario makes about its training sets; ``a`` is the set it is checked on."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    a: str
    why: str = Field(description="the scenario (kind) that makes the promise, for messages")


class Disjoint(Relation):
    """No class (or item) of ``a`` is in ``b``."""

    b: str
    unit: Unit


class Subset(Relation):
    """Every class (or item) of ``a`` is in ``b``: ``a`` is nested in ``b``."""

    b: str
    unit: Unit


class Equal(Relation):
    """``a`` and ``b`` hold the same classes (or items)."""

    b: str
    unit: Unit


class ClassPrefix(Relation):
    """``a``'s class order is a prefix of ``b``'s: ``b`` keeps ``a``'s class indices (the fixed
    d-Simplex head of a child that extends its parent relies on it)."""

    b: str


class ClassCount(Relation):
    """``a`` holds exactly ``count`` classes: a number, or a share of the training pool's."""

    count: int | Share


class ItemsPerClass(Relation):
    """Every class of ``a`` holds ``share`` of its source items."""

    share: Share = Share()


class Replay(Relation):
    """Class-incremental replay (CL2R): ``a`` holds min(``memory``, n) items of each of the n-item
    classes of ``earlier`` (the previous task), taken from ``earlier``'s items, and every item of
    each class it adds."""

    earlier: str
    memory: int = Field(ge=0, le=1_000_000)


class _Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def names(self) -> list[str]:
        raise NotImplementedError

    def relations(self) -> list[Relation]:
        """What the training sets of ``assign`` promise each other and the training pool."""
        raise NotImplementedError


class TwoVersion(_Scenario):
    """The five UniBCT scenarios: an old and a new training set.

    - extended-data: old = ``old_fraction`` of the images of every class; new = all images.
    - open-data: old = ``old_fraction`` of the images; new = the other images, same classes.
    - extended-class: old = ``old_fraction`` of the classes; new = all classes.
    - open-class: old = ``old_fraction`` of the classes; new = the other classes.
    - identical-data: new = old = ``old_fraction`` of the images of every class (UniBCT: both
      versions train on the same data, the old version's share).
    """

    kind: Literal["extended-data", "open-data", "extended-class", "open-class", "identical-data"]
    old_fraction: float = Field(0.3, gt=0.0, lt=1.0)
    old: Name = "old"
    new: Name = "new"

    def names(self) -> list[str]:
        return [self.old, self.new]

    def assign(self, pool: Pool) -> TrainSets:
        classes = list(pool)
        everything = [i for c in classes for i in pool[c]]
        if self.kind in ("extended-data", "open-data", "identical-data"):
            if any(len(v) < 2 for v in pool.values()) and self.kind == "open-data":
                raise ValueError("open-data needs at least 2 images in every training class")
            cut = {c: _take(len(v), self.old_fraction) for c, v in pool.items()}
            if self.kind == "open-data":
                cut = {c: min(k, len(pool[c]) - 1) for c, k in cut.items()}
            old = [i for c in classes for i in pool[c][: cut[c]]]
            if self.kind == "identical-data":
                return {self.old: (old, classes), self.new: (list(old), classes)}
            new = (
                everything
                if self.kind == "extended-data"
                else [i for c in classes for i in pool[c][cut[c] :]]
            )
            return {self.old: (old, classes), self.new: (new, classes)}
        if len(classes) < 2:
            raise ValueError(f"{self.kind} needs at least 2 training classes")
        # The new version must hold classes the old one lacks, so at least one is left out.
        k = min(_take(len(classes), self.old_fraction), len(classes) - 1)
        old_cls = classes[:k]
        new_cls = classes if self.kind == "extended-class" else classes[k:]
        return {
            self.old: ([i for c in old_cls for i in pool[c]], old_cls),
            self.new: ([i for c in new_cls for i in pool[c]], new_cls),
        }

    def relations(self) -> list[Relation]:
        """UniBCT Table 1: each set's class count and items per class, then the pair's relation
        (same classes, nested or disjoint classes or items, the old class order kept)."""
        o, n, why = self.old, self.new, self.kind
        every = Share()
        f = self.old_fraction
        if why == "extended-data":
            return [
                ClassCount(a=o, why=why, count=every),
                ClassCount(a=n, why=why, count=every),
                ItemsPerClass(a=o, why=why, share=Share(fraction=f)),
                ItemsPerClass(a=n, why=why, share=every),
                Equal(a=n, b=o, unit="classes", why=why),
                ClassPrefix(a=o, b=n, why=why),
                Subset(a=o, b=n, unit="items", why=why),
            ]
        if why == "open-data":
            # Each class keeps at least one image for the new version (assign's n - 1 cap).
            part = Share(fraction=f, spare=1)
            return [
                ClassCount(a=o, why=why, count=every),
                ClassCount(a=n, why=why, count=every),
                ItemsPerClass(a=o, why=why, share=part),
                ItemsPerClass(a=n, why=why, share=Share(fraction=f, spare=1, rest=True)),
                Equal(a=n, b=o, unit="classes", why=why),
                ClassPrefix(a=o, b=n, why=why),
                Disjoint(a=n, b=o, unit="items", why=why),
            ]
        if why in ("extended-class", "open-class"):
            # The new version always holds a class the old one lacks (assign's n - 1 cap).
            part = Share(fraction=f, spare=1)
            new_count = every if why == "extended-class" else Share(fraction=f, spare=1, rest=True)
            shape: list[Relation] = [
                ClassCount(a=o, why=why, count=part),
                ClassCount(a=n, why=why, count=new_count),
                ItemsPerClass(a=o, why=why, share=every),
                ItemsPerClass(a=n, why=why, share=every),
            ]
            if why == "open-class":
                return [*shape, Disjoint(a=n, b=o, unit="classes", why=why)]
            return [
                *shape,
                Subset(a=o, b=n, unit="classes", why=why),
                ClassPrefix(a=o, b=n, why=why),
                Subset(a=o, b=n, unit="items", why=why),
            ]
        return [  # identical-data: the old version's share of every class, for both
            ClassCount(a=o, why=why, count=every),
            ClassCount(a=n, why=why, count=every),
            ItemsPerClass(a=o, why=why, share=Share(fraction=f)),
            ItemsPerClass(a=n, why=why, share=Share(fraction=f)),
            Equal(a=n, b=o, unit="classes", why=why),
            ClassPrefix(a=o, b=n, why=why),
            Equal(a=n, b=o, unit="items", why=why),
        ]


class Chain(_Scenario):
    """Multi-version chains (BCT's three versions): nested fractions of classes or of images."""

    kind: Literal["chain"]
    unit: Literal["classes", "data"] = "classes"
    fractions: dict[Name, float] = {"v1": 0.25, "v2": 0.5, "v3": 1.0}

    @model_validator(mode="after")
    def _check(self) -> Chain:
        values = list(self.fractions.values())
        if not values:
            raise ValueError("fractions: at least one version")
        if any(not 0 < v <= 1 for v in values):
            raise ValueError("fractions: each must lie in (0, 1]")
        if values != sorted(values):
            raise ValueError("fractions: must not decrease along the chain")
        return self

    def names(self) -> list[str]:
        return list(self.fractions)

    def assign(self, pool: Pool) -> TrainSets:
        classes = list(pool)
        out: TrainSets = {}
        for name, frac in self.fractions.items():
            if self.unit == "classes":
                cls = classes[: _take(len(classes), frac)]
                out[name] = ([i for c in cls for i in pool[c]], cls)
            else:
                out[name] = (
                    [i for c in classes for i in pool[c][: _take(len(pool[c]), frac)]],
                    classes,
                )
        return out

    def relations(self) -> list[Relation]:
        """BCT's chain: each version's share of the pool, nested in the next (items and class
        order)."""
        why = "chain"
        out: list[Relation] = []
        for name, frac in self.fractions.items():
            part = Share(fraction=frac)
            by_class = self.unit == "classes"
            out += [
                ClassCount(a=name, why=why, count=part if by_class else Share()),
                ItemsPerClass(a=name, why=why, share=Share() if by_class else part),
            ]
        for parent, child in itertools.pairwise(self.fractions):
            out += [
                Subset(a=parent, b=child, unit="classes", why=why),
                ClassPrefix(a=parent, b=child, why=why),
                Subset(a=parent, b=child, unit="items", why=why),
            ]
        return out


class Incremental(_Scenario):
    """Class-incremental task sequences (CL2R): ``initial`` classes, then ``per_task`` new ones
    per task, each task replaying up to ``memory`` images of every class seen before.

    Task t's training set is named ``<prefix><t>`` (``t1``, ``t2``, ...). For every task listed in
    ``cumulative`` a second set ``<prefix><t>-all`` holds *every* image of every class seen up to
    task t (no replay limit): what a replacement model, trained from scratch on all data seen so
    far, learns from. Both sets of task t share its class order.

    With ``pretrain`` > 0 the first ``pretrain`` classes of the pool form one more set,
    ``pretrain_name``, on which the starting model and the improved replacement models are
    pre-trained (the d-Simplex/HOC paper's IAM-CL2R protocol): its classes are disjoint from every
    task's (and, as every training class, from the evaluation classes). It holds every image of
    each class, or only the first ``pretrain_images`` of each (in the pool's seeded order): many
    classes with few images each fill more of the fixed d-Simplex head's vertices for the same
    number of images in all.
    """

    kind: Literal["incremental"]
    initial: int = Field(10, ge=1, le=10_000_000)
    per_task: int = Field(5, ge=1, le=10_000_000)
    tasks: int = Field(5, ge=1, le=10_000, description="number of tasks, the initial one included")
    memory: int = Field(0, ge=0, le=1_000_000, description="replay images kept per earlier class")
    prefix: Name = "t"
    cumulative: list[int] = Field(
        default_factory=list,
        description="tasks (1-based) that also get '<prefix><t>-all': all images seen so far",
    )
    pretrain: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="classes of a pre-training set disjoint from every task (0: none)",
    )
    pretrain_name: Name = "pretrain"
    pretrain_images: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="images kept per pre-training class (None: every one)",
    )

    @model_validator(mode="after")
    def _check(self) -> Incremental:
        bad = [t for t in self.cumulative if not 1 <= t <= self.tasks]
        if bad:
            raise ValueError(f"cumulative: tasks must lie in 1..{self.tasks}, got {bad}")
        if len(set(self.cumulative)) != len(self.cumulative):
            raise ValueError("cumulative: a task is listed twice")
        tasks = {f"{self.prefix}{t}" for t in range(1, self.tasks + 1)}
        if self.pretrain and (self.pretrain_name in tasks or self.pretrain_name.endswith("-all")):
            raise ValueError(f"pretrain_name: {self.pretrain_name!r} is a task's name")
        if self.pretrain_images is not None and not self.pretrain:
            raise ValueError("pretrain_images: set, but there is no pre-training set (pretrain: 0)")
        return self

    def task_names(self) -> list[str]:
        return [f"{self.prefix}{t}" for t in range(1, self.tasks + 1)]

    def names(self) -> list[str]:
        pre = [self.pretrain_name] if self.pretrain else []
        return pre + self.task_names() + [f"{self.prefix}{t}-all" for t in sorted(self.cumulative)]

    def assign(self, pool: Pool) -> TrainSets:
        classes = list(pool)
        need = self.pretrain + self.initial + self.per_task * (self.tasks - 1)
        if need > len(classes):
            raise ValueError(
                f"incremental needs {need} training classes, the pool has {len(classes)}"
            )
        out: TrainSets = {}
        if self.pretrain:
            pre, classes = classes[: self.pretrain], classes[self.pretrain :]
            cap = self.pretrain_images
            out[self.pretrain_name] = ([i for c in pre for i in pool[c][:cap]], pre)
        seen: list[str] = []
        for t, name in enumerate(self.task_names()):
            lo = 0 if t == 0 else self.initial + self.per_task * (t - 1)
            hi = self.initial + self.per_task * t
            new_cls = classes[lo:hi]
            replay = [i for c in seen for i in pool[c][: self.memory]]
            out[name] = (replay + [i for c in new_cls for i in pool[c]], seen + new_cls)
            seen = seen + new_cls
            if t + 1 in self.cumulative:
                out[f"{name}-all"] = ([i for c in seen for i in pool[c]], list(seen))
        return {name: out[name] for name in self.names()}

    def relations(self) -> list[Relation]:
        """CL2R: each task's class count, the earlier task's class order kept, replay memory from
        the earlier task; a cumulative set has its task's classes, in its order, with every item."""
        why = "incremental"
        tasks = self.task_names()
        out: list[Relation] = [ItemsPerClass(a=tasks[0], why=why)]
        for t, name in enumerate(tasks):
            out.append(ClassCount(a=name, why=why, count=self.initial + self.per_task * t))
        for prev, cur in itertools.pairwise(tasks):
            out += [
                Subset(a=prev, b=cur, unit="classes", why=why),
                ClassPrefix(a=prev, b=cur, why=why),
                Replay(a=cur, earlier=prev, memory=self.memory, why=why),
            ]
        if self.pretrain:
            pre, why = self.pretrain_name, "pretrain"
            out += [
                ClassCount(a=pre, why=why, count=self.pretrain),
                ItemsPerClass(a=pre, why=why, share=Share(most=self.pretrain_images)),
                *(Disjoint(a=pre, b=task, unit="classes", why=why) for task in tasks),
            ]
        why = "cumulative"
        for t in sorted(self.cumulative):
            task = tasks[t - 1]
            every = f"{task}-all"
            out += [
                ItemsPerClass(a=every, why=why),
                Equal(a=every, b=task, unit="classes", why=why),
                ClassPrefix(a=task, b=every, why=why),  # with equal class sets: the same order
                Subset(a=task, b=every, unit="items", why=why),
            ]
        return out


Scenario = Annotated[TwoVersion | Chain | Incremental, Field(discriminator="kind")]
