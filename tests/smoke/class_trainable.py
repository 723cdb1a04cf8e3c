"""A Tune class-API trainable (not a fixture's own): the re-run path for Trainable classes.

Like tune_trial_error's function trainable, it fails at iteration 3 when lr is 0.1.
"""

from ray import tune


class DivergingTrainable(tune.Trainable):
    def setup(self, config):
        self.lr = config["lr"]
        self.ballast = bytearray(64 * 2**20)  # 64 MiB held for the whole trial: RSS to measure

    def step(self):
        if self.lr == 0.1 and self.iteration == 2:  # the third step
            raise ValueError("lr=0.1 is too large: loss diverged")
        return {"loss": 1.0 / (self.iteration + 1)}
