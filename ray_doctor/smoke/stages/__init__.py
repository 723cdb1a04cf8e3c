"""The smoke stages, one module each, as the runner (a child process with Ray imported)
executes them: `cluster`, `device`, `collective`, `checkpoint`, `port`, `environment`,
`relaunch`; what they share is in `_common`.

Each stage function returns a `StageResult`; a stage never raises for what it tests. Blocking
Ray calls (a Tune run, a Train run) run in a thread with a bound, so one that hangs is
reported as such instead of hanging the smoke run.
"""
