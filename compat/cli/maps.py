"""``compat adapt`` (fit a query adapter from paired embeddings) and ``compat embed`` (a
version's embeddings of a split, manifest or folder, through the embedding cache).

Registered on the main app by ``maps.register(app)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from compat.cli.common import exit_on_error
from compat.errors import NOTHING_DONE

ADAPT_HELP = (
    "Fit a query adapter: a map that takes a new model's query embeddings into the old "
    "model's space, so the stored old gallery can be searched without a backfill "
    "(Drift-Adapter, Vejendla, EMNLP 2025). With --role gallery-map the map goes the other "
    "way, stored old rows into the new space (BiCT's psi, fitted between any two versions or "
    "embedding files), for compat backfill --psi DIR. With --role query-blend it fits a query "
    "blend: the adapter's queries interpolated on the sphere with the old model's own (SLERP; "
    "each query is embedded by both models when served), the weight selected on held-out "
    "classes (--blend-weight W fixes it).\n\n"
    "Pairs are the same items embedded by both models: --new FILE and --old FILE (any format "
    "compat reads: .npz, .npy with its .meta.npz sidecar, a folder of Parquet shards), matched "
    "by their ids (row for row when neither has ids); or --new-version V --old-version W "
    "--split NAME (or --manifest / --folder), embedded through the embedding cache. Labels, "
    "when the rows have them, make the check class retrieval on held-out classes.\n\n"
    "Kinds: procrustes (closed-form orthogonal map, semi-orthogonal between two widths; "
    "--param scaling=true adds a global scale and translation), affine (ridge closed form; "
    "--param ridge=0.001, --param rank=R for low rank), residual-mlp (BiCT's psi module and "
    "fit loop; --param hidden=, blocks=, epochs=, lr=, ...).\n\n"
    "The refusal rule: --val-fraction of the classes (of the rows without labels) is held out; "
    "the adapter must beat its baseline there with the gate's paired bootstrap: the one-sided "
    "--confidence lower bound of the top-1 gain must be above --min-gain. The baseline is the "
    "raw new rows against the old ones, or, for an incompatible pair (the widths differ, or "
    "the raw rows are near chance), the old model's own self test M(old, old). Both numbers "
    "are printed and written into the card. With a check set (--check-split NAME with the "
    "versions: a held-out manifest such as splits/validation.json, classes neither model was "
    "trained on; or --check-new FILE --check-old FILE, both models' rows of such items, "
    "labelled, each searching the others) the map is also checked there as the gate judges "
    "the configuration serving it (served queries against M(old, old), the same bound), and "
    "that check decides.\n\n"
    "--out is a folder: weights.safetensors, then card.json (kind, widths, weights sha256, "
    "data fingerprint, fit time, held-out numbers, the refusal); an existing --out is replaced "
    "only when it holds a map (or nothing), and whole: the new map is written beside it and "
    "swapped in.\n\n"
    "Exit codes: 0 the adapter was kept (or refused, accepted with --allow-refused); 2 usage "
    "(unknown kind, role or parameter, both or neither of --new/--old and the versions, an --out "
    "that is not a map folder or cannot be written, a --cache that is not a folder, --seed "
    "outside 0 .. 2**32 - 1, --resamples over 100,000, --min-gain of 1 or more, an unknown "
    "--device); 3 a file, version, split or folder is missing; 4 bad input "
    "(ids that do not pair up, labels that disagree, unreadable files, NaN or inf rows, too "
    "few pairs); 5 the disk is full or read-only; 7 the adapter was refused (--out is still "
    "written, its card says why)."
)

EMBED_HELP = (
    "Embed items with a trained version (models/<VERSION>/) through the embedding cache, and "
    "write the embeddings to --out.\n\n"
    "Items: --split NAME (splits/NAME.json, a training or the evaluation manifest; pixels from "
    "data/source.json), --manifest FILE (CSV path,label[,group]) or --folder DIR (one "
    "sub-folder per class). The cache key is the version's weights sha256, the data "
    "fingerprint and the transform, as in the evaluate stage, so a split it embedded is not "
    "embedded again; on a miss the model embeds the items with progress on stderr.\n\n"
    "The format follows --out: .npz (a bundle), .npy (the matrix; ids, labels and provenance "
    "in a <stem>.meta.npz sidecar) or a folder (Parquet shards). Labels are integer codes of "
    "the sorted class names, which the file's meta lists. An existing --out is replaced only "
    "when a compat command wrote it (its meta says which); anything else there is refused "
    "before any work and left as it is. A Parquet folder is written beside it and swapped in "
    "whole.\n\n"
    "--out <folder>/<name>.lance writes a LanceDB table: a new one holds id, label and the "
    "column vec_<VERSION>; in an existing one the rows are matched by id and fill "
    "vec_<VERSION> (added if missing; the other columns untouched; every item must be a row of "
    "the table). Re-embedding a backfilled gallery's images this way replaces the mapped rows "
    "of those items. See docs/lancedb.md.\n\n"
    "Exit codes: 0 written; 2 usage (none or several of --split/--manifest/--folder, an --out "
    "of unknown format, an --out or --cache that cannot be written, an --out holding "
    "something compat did not write, a --device this machine lacks: before any work, on a "
    "cache hit too); 3 the version, split, manifest, folder or data source is missing; 4 "
    "bad input (a bad card or weights, unreadable images, a source of another image size; a "
    "table whose ids do not hold the items, or whose vec_<VERSION> has another width); 5 the "
    "disk is full or read-only; 6 another command is writing the table."
)


def _params(pairs: list[str] | None) -> dict[str, str]:
    from compat.errors import UsageError

    out: dict[str, str] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param {item!r}: expected key=value")
        out[key.strip()] = None if value.strip().lower() in ("none", "null") else value.strip()  # type: ignore[assignment]
    return out


def _check_config(val_fraction, confidence, min_gain, resamples, seed):
    """The check options as a :class:`compat.maps.CheckConfig`; a bad value is exit 2."""
    from pydantic import ValidationError

    from compat.errors import UsageError
    from compat.maps import CheckConfig

    try:
        return CheckConfig(
            val_fraction=val_fraction, confidence=confidence, min_gain=min_gain,
            resamples=resamples, seed=seed,
        )  # fmt: skip
    except ValidationError as err:
        e = err.errors()[0]
        option = "--" + str(e["loc"][0]).replace("_", "-")
        raise UsageError(f"{option}: {e['msg']}") from None


def _check_out(out: Path) -> None:
    """--out may be new, an empty folder or a map folder (:func:`compat.maps.store.map_owner`);
    anything else is not ours to replace: exit 2 (5 on a read-only file system), before the fit."""
    from compat.maps.store import map_owner
    from compat.outputs import claim

    claim(out, "folder", map_owner, "--out", "a map folder")


def adapt(
    new: Path | None = typer.Option(
        None, "--new", help="New model's embeddings of the paired items (.npz, .npy, Parquet)."
    ),
    old: Path | None = typer.Option(
        None, "--old", help="Old model's embeddings of the same items (.npz, .npy, Parquet)."
    ),
    kind: str = typer.Option(..., "--kind", help="procrustes, affine or residual-mlp (see above)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the adapter into."),
    role: str = typer.Option(
        "query-adapter",
        "--role",
        help="query-adapter (new queries -> old space), query-blend (those queries interpolated "
        "with the old model's own) or gallery-map (stored old rows -> new space, as BiCT's psi: "
        "for compat backfill --psi).",
    ),
    new_version: str | None = typer.Option(
        None, "--new-version", help="Embed the pairs with this version (models/<V>/)."
    ),
    old_version: str | None = typer.Option(
        None, "--old-version", help="... and with this one, the gallery's version."
    ),
    split: str | None = typer.Option(
        None, "--split", help="With the versions: embed splits/NAME.json's items."
    ),
    manifest: Path | None = typer.Option(
        None, "--manifest", help="With the versions: embed a CSV manifest's images."
    ),
    folder: Path | None = typer.Option(
        None, "--folder", help="With the versions: embed an image folder (one per class)."
    ),
    param: list[str] = typer.Option(
        None, "--param", help="A kind parameter key=value (repeatable), e.g. ridge=0.01."
    ),
    val_fraction: float = typer.Option(
        0.2, "--val-fraction", help="Share of classes (rows) held out to check the adapter."
    ),
    confidence: float = typer.Option(
        0.95, "--confidence", help="Level of the bootstrap lower bound the gain must clear."
    ),
    min_gain: float = typer.Option(
        0.0, "--min-gain", help="Top-1 the adapter must add over its baseline."
    ),
    resamples: int = typer.Option(1000, "--resamples", min=1, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Seed of the held-out split, bootstrap and fit."),
    min_match: float = typer.Option(
        0.9, "--min-match", min=0.0, max=1.0, help="Share of the smaller file's ids that must pair."
    ),
    no_labels: bool = typer.Option(
        False, "--no-labels", help="Ignore labels: hold out rows, check by pair retrieval."
    ),
    models: Path = typer.Option(Path("models"), "--models", help="Folder of trained versions."),
    cache: Path = typer.Option(
        Path("cache/embeddings"), "--cache", help="Embedding cache folder (with the versions)."
    ),
    device: str | None = typer.Option(
        None, "--device", help="Where to embed with the versions: cpu, cuda (default: auto)."
    ),
    allow_refused: bool = typer.Option(
        False, "--allow-refused", help="A refused adapter exits 0 instead of 7."
    ),
    blend_weight: float | None = typer.Option(
        None,
        "--blend-weight",
        min=0.0,
        max=1.0,
        help="With --role query-blend: a fixed weight on the adapted query (default: selected).",
    ),
    check_split: str | None = typer.Option(
        None,
        "--check-split",
        help="With the versions: check the map on splits/NAME.json as the gate judges.",
    ),
    check_new: Path | None = typer.Option(
        None, "--check-new", help="New model's rows of a held-out labelled set (the check set)."
    ),
    check_old: Path | None = typer.Option(
        None, "--check-old", help="Old model's rows of the same items (the check set)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the card as one JSON object."),
) -> None:
    code = 0
    with exit_on_error():
        from compat.errors import BadInputError, UsageError
        from compat.maps import MAP_ROLES, fit_map, save_map
        from compat.maps.kinds import kind_params

        if role not in MAP_ROLES:
            raise UsageError(f"--role {role!r}: expected one of {', '.join(MAP_ROLES)}")
        p = kind_params(kind, _params(param))  # unknown kind or parameter: exit 2
        check = _check_config(val_fraction, confidence, min_gain, resamples, seed)
        _check_out(out)
        files, versions = (new, old), (new_version, old_version)
        if any(v is not None for v in files) == any(v is not None for v in versions) or (
            None in (files if any(v is not None for v in files) else versions)
        ):
            raise UsageError(
                "give the pairs as --new FILE --old FILE, or as --new-version V --old-version W "
                "with --split, --manifest or --folder"
            )
        if blend_weight is not None and role != "query-blend":
            raise UsageError("--blend-weight: only with --role query-blend")
        if (check_new is None) != (check_old is None) or (
            check_split is not None and (check_new is not None or new_version is None)
        ):
            raise UsageError(
                "give a check set as --check-new FILE --check-old FILE, or as --check-split NAME "
                "with --new-version and --old-version"
            )
        if new is not None and old is not None:
            from compat.maps.pairs import match_pairs, read_rows

            pairs = match_pairs(
                read_rows(new, not no_labels), read_rows(old, not no_labels), min_match=min_match
            )
            names = (new.stem, old.stem)
        else:
            pairs = _version_pairs(
                new_version, old_version, split, manifest, folder, models, cache, device
            )
            names = (str(new_version), str(old_version))
        check_set = _check_set(
            check_split, check_new, check_old, new_version, old_version, models, cache, device,
            min_match,
        )  # fmt: skip
        for note in pairs.notes:
            print(f"note: {note}", file=sys.stderr)
        labels = None if no_labels else pairs.labels
        if len(pairs.new) < 4:
            raise BadInputError(f"{new or new_version}: {len(pairs.new)} paired rows; need >= 4")
        if role != "gallery-map":  # new -> old
            source, target = (
                (pairs.new, names[0], pairs.new_info),
                (pairs.old, names[1], pairs.old_info),
            )
        else:  # gallery-map: old -> new
            source, target = (
                (pairs.old, names[1], pairs.old_info),
                (pairs.new, names[0], pairs.new_info),
            )
        fitted = fit_map(
            kind, source[0], target[0], labels=labels, ids=pairs.ids, params=p, check=check,
            role=role, from_name=source[1], to_name=target[1], source_info=source[2],
            target_info=target[2], check_set=check_set,
            blend=None if role != "query-blend" else {"weight": blend_weight},
        )  # fmt: skip
        save_map(out, fitted)
        card = fitted.card
        if card.refused is not None and not allow_refused:
            code = NOTHING_DONE
    if as_json:
        sys.stdout.write(json.dumps(card.to_json(), sort_keys=True) + "\n")
        raise typer.Exit(code)
    h = card.heldout
    assert h is not None
    if h.mapped is not None:
        print(
            f"adapt: {kind} {card.from_} ({card.in_dim}) -> {card.to} ({card.out_dim}) on "
            f"{h.num_fit} pairs in {card.fit_seconds:.2f} s; held-out {h.split} "
            f"({h.queries} queries, {h.retrieval} retrieval): top-1 {h.mapped:.4f} with the "
            f"adapter, {h.baseline:.4f} {h.baseline_kind}"
            + (f" (no-map {h.no_map:.4f})" if h.baseline_kind != "no-map" and h.no_map is not None else "")
            + (f"; lower bound of the gain {h.lower_bound:+.4f} at {h.confidence:g}" if h.lower_bound is not None else "")
        )  # fmt: skip
    if card.blend is not None:
        b = card.blend
        print(f"adapt: blend weight {b.weight:g} (selected on {b.selected_on} held-out queries)")
    v = card.verdict
    if v is not None and v.served is not None:
        print(
            f"adapt: on {v.set} as the gate judges: top-1 {v.served:.4f} served, {v.old_self:.4f} "
            f"M(old, old); lower bound of the gain {v.lower_bound:+.4f} at {v.confidence:g}"
        )
    if card.refused is not None:
        hint = "" if allow_refused else " (exit 7; --allow-refused accepts this)"
        print(f"adapt: refused: {card.refused.reason}; wrote {out}{hint}")
    else:
        print(f"adapt: kept; wrote {out}")
    raise typer.Exit(code)


def _check_cache(cache: Path) -> None:
    """--cache must be a folder compat can write entries into (exit 2 or 5 before any work)."""
    from compat.outputs import check_target

    check_target(cache, "folder", "--cache")


def _check_set(split, new_file, old_file, new_version, old_version, models, cache, device,
               min_match):  # fmt: skip
    """The check set of the options (None without one): a split both versions embed, or two
    files of labelled rows (each item searching all the others: leave-one-out)."""
    from types import SimpleNamespace

    from compat.errors import BadInputError
    from compat.maps.verdict import CheckSet

    if split is not None:
        from compat.data.split import load_eval_manifest

        path = Path("splits") / f"{split}.json"
        m = load_eval_manifest(path)
        p = _version_pairs(new_version, old_version, split, None, None, models, cache, device)
        return CheckSet(f"split:{split}", m, p.new, p.old, m.fingerprint)
    if new_file is None or old_file is None:
        return None
    from compat.maps.pairs import match_pairs, read_rows

    p = match_pairs(read_rows(new_file), read_rows(old_file), min_match=min_match)
    if p.labels is None:
        raise BadInputError(f"{new_file}: labels: a check set needs labelled rows")
    n = len(p.new)
    m = SimpleNamespace(items=list(p.ids or range(n)), labels=[str(x) for x in p.labels],
                        query=list(range(n)), gallery=list(range(n)), pairs=[])  # fmt: skip
    return CheckSet(f"{new_file.name} and {old_file.name}", m, p.new, p.old)


def _version_pairs(new_version, old_version, split, manifest, folder, models, cache, device):
    from compat.maps.versions import version_pairs

    _check_cache(cache)

    return version_pairs(
        new_version, old_version, split=split, manifest=manifest, folder=folder,
        models_dir=models, cache_root=cache, device=device,
    )  # fmt: skip


def embed(
    version: str = typer.Argument(..., help="The version to embed with (models/<VERSION>/)."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Output: .npz, .npy, a folder or a .lance table."
    ),
    split: str | None = typer.Option(None, "--split", help="Embed splits/NAME.json's items."),
    manifest: Path | None = typer.Option(
        None, "--manifest", help="Embed a CSV manifest's images (path,label[,group])."
    ),
    folder: Path | None = typer.Option(
        None, "--folder", help="Embed an image folder (one sub-folder per class)."
    ),
    models: Path = typer.Option(Path("models"), "--models", help="Folder of trained versions."),
    cache: Path = typer.Option(Path("cache/embeddings"), "--cache", help="Embedding cache folder."),
    batch_size: int = typer.Option(512, "--batch-size", min=1, help="Images per forward pass."),
    device: str | None = typer.Option(None, "--device", help="cpu or cuda (default: auto)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines on stderr."),
) -> None:
    with exit_on_error():
        from compat.embeddings.formats import format_of
        from compat.maps.versions import embed_version, open_items, write_embeddings
        from compat.models.card import read_model_card

        fmt = format_of(out)  # an unknown format is a usage error before any work
        if fmt != "lance":  # the one checked-output path: before any work, a user's file kept
            from compat.embeddings.gallery_out import claim_gallery

            claim_gallery(out, fmt)
        _check_cache(cache)
        if fmt == "lance":  # before any work: the version names a column, LanceDB is there
            from compat.embeddings.table import check_version, lance_module

            check_version(version, "VERSION")
            lance_module()
        card = read_model_card(models / version)
        with open_items(
            split=split, manifest=manifest, folder=folder, image_size=card.image_size,
            channels=card.in_channels,
        ) as items:  # fmt: skip
            bundle = embed_version(
                version, items, models_dir=models, cache_root=cache, batch_size=batch_size,
                device=device, progress=not quiet,
            )  # fmt: skip
        if fmt == "lance":
            from compat.embeddings.table_columns import column_for
            from compat.embeddings.table_write import write_table_embeddings

            write_table_embeddings(out, bundle)
            where = f"{column_for(version)} of {out}"
        else:
            write_embeddings(out, bundle)
            where = str(out)
    print(f"embed: {version}: {len(bundle)} x {bundle.dim} rows of {items.name}; wrote {where}")


def register(app: typer.Typer) -> None:
    app.command("adapt", help=ADAPT_HELP)(adapt)
    app.command("embed", help=EMBED_HELP)(embed)
