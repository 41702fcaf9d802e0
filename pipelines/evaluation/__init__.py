"""Scoring agents' predicted actions against the recorded steps of a study (issue 33, item 5).

`matching` holds the one matching rule (pure); `runs` reads the predictions and the steps and stores a run.
Rules and fields: schemas/evaluation.md.
"""
