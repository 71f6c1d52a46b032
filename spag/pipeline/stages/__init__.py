"""One module per DVC stage, each holding the stage's function (named as the stage) and importing at its top
the code the stage runs: :mod:`spag.pipeline.dvcyaml` reads those imports to list the stage's code
dependencies in dvc.yaml.
"""
