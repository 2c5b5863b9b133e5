"""How long a bootstrap run trains: every epoch of its recipe, or as many steps as its training budget allows at the
step rate measured on this machine, whichever is fewer; the learning rate over those steps, and the optimizer that
follows it (every run's: train.loop's and train.retrieval's)."""

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


def optimizer(model, recipe: dict, plan: Plan):
    """(schedule, optimizer): the recipe's learning rate warmed up and decayed over `plan`'s steps, and AdamW with
    weight decay on every weight but biases and norms, and the recipe's gradient clipping."""
    import paddle

    schedule = paddle.optimizer.lr.LambdaDecay(recipe["learning_rate"], plan.lr_factor)
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    return schedule, paddle.optimizer.AdamW(
        learning_rate=schedule,
        parameters=model.parameters(),
        weight_decay=recipe["weight_decay"],
        apply_decay_param_fun=lambda name: name not in no_decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(recipe["max_grad_norm"]) if recipe["max_grad_norm"] else None,
    )
