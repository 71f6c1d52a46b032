"""The DVC side: every stage declared once, one module per stage, and what runs around them.

- :mod:`spag.pipeline.table`      the stage table: each stage's params, data and outputs (dvc.yaml's source)
- :mod:`spag.pipeline.run`        the harness: how a stage runs (params checked, preflight, signals, process)
- :mod:`spag.pipeline.context`    what a stage's work is handed: a view of its declared params, the layout
- :mod:`spag.pipeline.stages`     one module per stage, importing at its top the code it runs
- :mod:`spag.pipeline.evaluation`, :mod:`~spag.pipeline.benchmarking`, :mod:`~spag.pipeline.training`
                                  what several stages share
- :mod:`spag.pipeline.preflight`  what a run needs, checked before any work
- :mod:`spag.pipeline.report`     per-epoch report, plot tables and learning curves
- :mod:`spag.pipeline.dvcyaml`    dvc.yaml written from the table and the code each stage imports
- :mod:`spag.pipeline.imports`    the package's import graph, read from the source

May import every layer below it: evaluate, analyze, train, play, rewards, config, game, players, models,
schema, runtime. Only the command line imports it.
"""
