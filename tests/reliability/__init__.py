"""Reliability tests (issue 4; the plan is ../shared/research/reliability.md, T1-T10).

Every robustness test here is paired with a mutation check: the same test run against a
deliberately broken variant of convgit (monkeypatched) must fail, which shows it has power.
"""
