"""How long a bootstrap run trains: every epoch of its recipe, or as many steps as its training budget allows at the
step rate measured on this machine, whichever is fewer; and the learning rate over those steps."""

from __future__ import annotations

# The step rate is measured over this many steps (after a few warm-up ones) before the run is planned.
PLAN_AFTER_STEPS = 30


class Plan:
    """How many steps the run takes: every epoch of the recipe, or as many as the training budget allows at the
    step rate measured on this machine (re-planned after each dev pass), whichever is fewer. The learning rate
    warms up and decays linearly over the planned steps, so a short budget still ends on a decayed rate."""

    def __init__(self, max_steps: int, budget_minutes: float | None, warmup_ratio: float):
        self.max_steps = self.total = max_steps
        self.budget_s = budget_minutes * 60 if budget_minutes else None
        self.warmup_ratio = warmup_ratio
        self.planned_at = 0

    def replan(self, step: int, elapsed_s: float, force: bool = False) -> bool:
        """Plan from the rate so far; returns whether the plan changed."""
        first = self.planned_at == 0 and step >= PLAN_AFTER_STEPS
        if self.budget_s is None or not (first or force) or step == 0:
            return False
        self.planned_at = step
        rate = step / max(elapsed_s, 1e-6)
        # Later plans only shorten the run (a slow stretch, a dev pass): the learning rate never climbs again.
        total = min(self.total, step + int(rate * max(0.0, self.budget_s - elapsed_s)))
        changed, self.total = total != self.total, max(total, step)
        return changed

    def lr_factor(self, step: int) -> float:
        warmup = max(1, int(self.total * self.warmup_ratio))
        if step < warmup:
            return step / warmup
        return max(0.0, (self.total - step) / max(1, self.total - warmup))
