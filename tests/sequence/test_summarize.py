"""summarize.py marks the replacements of a chain: versions that do not continue the previous one."""

from __future__ import annotations

from seq_scripts import script


def test_replacements_are_versions_that_do_not_continue_the_previous_one():
    summarize = script("summarize")
    chain = ["m-t1", "m-t2", "m-t3", "m-t4", "m-t5"]
    train = {
        "m-pre0": {"init": "scratch"},
        "m-pre1": {"init": "scratch"},
        "m-t1": {"parent": "m-pre0", "init": "parent"},  # the chain's start: never marked
        "m-t2": {"parent": "m-t1", "init": "parent"},
        "m-t3": {"parent": "m-pre1", "init": "parent"},  # a pre-trained model swapped in
        "m-t4": {"parent": "m-t3", "init": "parent"},
        "m-t5": {"parent": "m-t4", "init": "scratch"},  # from scratch, trained against m-t4
    }
    assert summarize.replaced(train, chain) == {"m-t3", "m-t5"}
    assert summarize.replaced(train, chain[:2]) == set()
