"""The examples and the benchmark parse their command line (no Spark started: ``--help``).

Running them end to end needs a broker on a known port and, for ``batch_iris``, scikit-learn's
iris CSV: see the README's Spark section (they were run by hand against ``make run``).
"""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["spark.examples.batch_iris", "spark.examples.streaming_rate",
                                    "spark.examples.stream_source", "spark.bench"])
def test_help(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--uri" in capsys.readouterr().out
