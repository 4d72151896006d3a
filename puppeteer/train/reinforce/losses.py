"""The policy-gradient losses of one batch: sampled REINFORCE, and the exact expectations of
``first_step=all`` (every first action tried) and ``second_step=all`` (every pair tried); the entropy
bonus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from puppeteer.envs.reward import step_cost
from puppeteer.policies.puppeteer import PuppeteerPolicy
from puppeteer.policies.puppeteer_scorer import Features
from puppeteer.train.reinforce.baselines import Groups, StepBaselines
from puppeteer.train.reinforce.config import ReinforceConfig

UNIFORM_SHARE = 0.1  # second_step=all: the share of each second-step state's weight spread evenly


def entropy_coef(config: ReinforceConfig, frac: float) -> float:
    """The entropy bonus's weight after ``frac`` of the run's episodes (linear decay)."""
    return config.entropy_coef * (1.0 - (1.0 - config.entropy_final_fraction) * frac)


def _entropy(logp_all: torch.Tensor) -> torch.Tensor:
    probs = logp_all.exp()
    # masked actions have logp -inf and p 0: zero them before the product (torch.where would
    # still send 0 * inf = nan through the untaken branch in backward)
    return -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1).mean()


def _sampled_loss(
    policy: PuppeteerPolicy, groups: Groups, baselines: StepBaselines
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """REINFORCE: sum over steps of -(G_t - b_t) log pi(a_t | s_t), per episode. Also returns the first
    actions taken (the collapse watch)."""
    feats, actions, advs = [], [], []
    for g, bs in zip(groups, baselines, strict=True):
        for ep, b in zip(g, bs, strict=True):
            feats += ep.feats
            actions += ep.actions
            advs += [ret - bt for ret, bt in zip(ep.returns, b, strict=True)]
    logp_all = torch.log_softmax(policy.logits(feats), dim=-1)
    logp = logp_all.gather(1, torch.as_tensor(actions)[:, None]).squeeze(1)
    adv = torch.as_tensor(advs, dtype=torch.float32)
    n = sum(len(g) for g in groups)
    firsts = [e.actions[0] for g in groups for e in g if e.actions]
    return -(adv * logp).sum() / n, _entropy(logp_all), firsts


def _exact_first(
    first_logp: torch.Tensor, index: torch.Tensor, returns: torch.Tensor, weights: str = "policy"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-sum_a w(a) (G_a - V) log pi(a) summed over rows, V = sum_a pi(a) G_a (pi's weights held fixed);
    also pi and V. ``weights="policy"``: w = pi, the gradient of the expected return; ``"uniform"``:
    w = 1 / |A|, whose gradient on a logit tends to the action's advantage (over |A|) as pi(a) -> 0,
    where pi's own weight vanishes: an agent the policy has turned from is still pulled back when it
    is better than the policy's choice (the tabular natural gradient's direction)."""
    tried = first_logp.gather(1, index)  # (rows, tried actions): index holds each row's tried actions
    pi = tried.exp().detach()
    pi = pi / pi.sum(dim=1, keepdim=True).clamp_min(1e-12)
    baseline = (pi * returns).sum(dim=1, keepdim=True)
    w = pi if weights == "policy" else torch.full_like(pi, 1.0 / pi.shape[1])
    return -(w * (returns - baseline) * tried).sum(), pi, baseline


def _relabelled(
    policy: PuppeteerPolicy, groups: Groups, lams: Sequence[Sequence[float]], phi: float
) -> tuple[list[Features], torch.Tensor]:
    """The groups' first observations and returns re-priced at other lambdas (one row per group and
    lambda). One-call episodes only: G(x) = r - x C with C = step_cost(F, 1, phi), so
    G(x) = G(lam) + (lam - x) C; checked against the env's own return at the episode's lambda."""
    lam_range = policy.lam_range
    if lam_range is None:
        raise ValueError("re-pricing at other lambdas needs a policy that reads lambda (lam_range)")
    feats: list[Features] = []
    rows: list[list[float]] = []
    for g, xs in zip(groups, lams, strict=True):
        priced = [step_cost(e.cost, 1, phi) if e.actions and e.cost else 0.0 for e in g]
        for e, c in zip(g, priced, strict=True):
            lam = float(e.lam if e.lam is not None else 0.0)
            paid = float(e.correct) - lam * c
            if len(e.returns) != 1 or abs(e.returns[0] - paid) > 1e-6 * max(1.0, abs(paid)):
                raise ValueError(
                    f"trainer.lam_relabel: episode of {e.task_id} is not one call priced r - lam C "
                    f"(return {e.returns}, expected {paid})"
                )
        for x in xs:
            feats.append(replace(g[0].feats[0], lam=lam_range.features(x)))
            rows.append(
                [e.returns[0] + (float(e.lam or 0.0) - x) * c for e, c in zip(g, priced, strict=True)]
            )
    return feats, torch.as_tensor(rows, dtype=torch.float32)


def _all_first_loss(
    policy: PuppeteerPolicy,
    groups: Groups,
    firsts: Sequence[Sequence[int]],
    relabel: Sequence[Sequence[float]] | None = None,
    phi: float = 1.0,
    later_baseline: str = "first",
    first_weights: str = "policy",
) -> tuple[torch.Tensor, torch.Tensor, list[int], float]:
    """Each group tried every first action open to it (``firsts``: per group, in its episodes' order)
    on one task; also returns V's mean over the groups, the policy's own expected return (the batch's
    mean return weighs every first action alike). The first decision's loss is the exact
    expectation -sum_a pi(a) (G_a - V) log pi(a) with V = sum_a pi(a) G_a (pi's weights held fixed);
    a later step t of the episode that opened with a0 adds -pi(a0) (G_t - b_t) log pi(a_t | s_t), with
    b_t = V (``later_baseline="first"``) or what stopping at t returns (``"stop"``).
    ``relabel`` (one-call episodes of a lambda-conditioned run): per group, more lambdas at which its
    first decision is learned too, from the same calls re-priced (:func:`_relabelled`)."""
    first_logp = torch.log_softmax(policy.logits([g[0].feats[0] for g in groups]), dim=-1)  # (groups, A)
    index = torch.as_tensor([list(f) for f in firsts])  # (groups, tried actions)
    returns = torch.as_tensor([[e.returns[0] for e in g] for g in groups], dtype=torch.float32)
    loss, pi, baseline = _exact_first(first_logp, index, returns, first_weights)
    rows = len(groups)
    if relabel is not None and any(relabel):
        feats, priced = _relabelled(policy, groups, relabel, phi)
        per_group = torch.as_tensor([len(xs) for xs in relabel])
        more, _, _ = _exact_first(
            torch.log_softmax(policy.logits(feats), dim=-1),
            index.repeat_interleave(per_group, dim=0),
            priced,
            first_weights,
        )
        loss, rows = loss + more, rows + len(feats)
    later_feats, later_actions, later_pi, later_adv = [], [], [], []
    for gi, g in enumerate(groups):
        for ai, e in enumerate(g):
            for t in range(1, len(e.actions)):
                later_feats.append(e.feats[t])
                later_actions.append(e.actions[t])
                b = e.stop_returns[t - 1] if later_baseline == "stop" else float(baseline[gi, 0])
                later_pi.append(float(pi[gi, ai]))
                later_adv.append(e.returns[t] - b)
    later_weights = [p * a for p, a in zip(later_pi, later_adv, strict=True)]
    logps = [first_logp]
    if later_feats:
        later_logp = torch.log_softmax(policy.logits(later_feats), dim=-1)
        taken = later_logp.gather(1, torch.as_tensor(later_actions)[:, None]).squeeze(1)
        loss = loss - (torch.as_tensor(later_weights, dtype=torch.float32) * taken).sum()
        logps.append(later_logp)
    greedy = [
        f[int(i)] for f, i in zip(firsts, torch.argmax(first_logp.gather(1, index), dim=1), strict=True)
    ]
    return loss / rows, _entropy(torch.cat(logps)), greedy, float(baseline.mean())


def _all_pairs_loss(
    policy: PuppeteerPolicy,
    groups: Groups,
    firsts: Sequence[Sequence[int]],
    seconds: Sequence[int],
    first_weights: str = "policy",
    second_target: float | None = None,
    state_weights: str = "policy",
) -> tuple[torch.Tensor, torch.Tensor, list[int], float]:
    """Each group tried every (first, second) pair of actions on one task (first-major: the episodes of
    first action i are ``g[i * S : (i + 1) * S]``, S = len(seconds)). Both decisions' losses are exact
    expectations under the current policy (its weights held fixed): after first action a0, with
    Q(b) = G_1 of the pair (a0, b) and V1 = sum_b pi(b | s1) Q(b), the second decision adds
    -(1 / |A0|) sum_b pi(b | s1) (Q(b) - V1) log pi(b | s1); the first is ``_exact_first`` on the
    returns G(a0) = sum_b pi(b | s1) G_0(a0, b), what a0 is worth when the policy then acts as it does.
    Weighing every first action's state alike (the gradient of the expected return would weigh it by
    pi(a0)) is policy iteration's order: each state's decision improves whether or not the policy
    goes there now, so a first action is judged by what the second step can make of it. With pi(a0)
    the cheap-first-then-escalate plan of tests/policies/test_cascade.py was lost on one seed of three: once
    the first step turned from the cheap agent, nothing taught the step after it.

    With ``second_target`` t the second decision is instead fitted to softmax(Q / t) over the actions
    tried (cross-entropy, each state weighed as above): bounded, and its pull on an action that pays
    does not shrink with the action's probability, where the policy gradient's does. Also returns the
    policy's own expected return, V's mean over the groups.

    ``state_weights="uniform"`` weighs every state after a first action alike (1 / |A0|), whatever the
    policy gives that action: with the first decision fixed (``trainer.init_first``, every first action
    tried) the decision after each call is learned for its own sake, as backward induction does."""
    n_second = len(seconds)
    first_logp = torch.log_softmax(policy.logits([g[0].feats[0] for g in groups]), dim=-1)  # (groups, A)
    index = torch.as_tensor([list(f) for f in firsts])
    s1_feats, s1_rows, blocks = [], [], []  # one second-step state per (group, first action)
    returns0 = torch.zeros(index.shape, dtype=torch.float32)
    for gi, g in enumerate(groups):
        for ai in range(len(firsts[gi])):
            block = g[ai * n_second : (ai + 1) * n_second]
            if all(len(e.feats) > 1 for e in block):
                s1_feats.append(block[0].feats[1])
                s1_rows.append((gi, ai))
                blocks.append(block)
            else:  # the first call ended the episode (a failed call): nothing to decide after it
                returns0[gi, ai] = block[0].returns[0]
    logps = [first_logp]
    second = None
    if s1_feats:
        second_logp = torch.log_softmax(policy.logits(s1_feats), dim=-1)
        # a second action the env did not offer on that item (``Episode.unoffered``) is masked out of
        # the logits too: it weighs nothing and is left out of the target
        offered = torch.as_tensor([[not e.unoffered for e in block] for block in blocks])
        tried = second_logp[:, list(seconds)].masked_fill(~offered, 0.0)  # (states, S)
        pi2 = tried.exp().detach() * offered
        pi2 = pi2 / pi2.sum(dim=1, keepdim=True).clamp_min(1e-12)
        q = torch.as_tensor([[e.returns[1] for e in block] for block in blocks], dtype=torch.float32)
        g0 = torch.as_tensor([[e.returns[0] for e in block] for block in blocks], dtype=torch.float32)
        q, g0 = q.masked_fill(~offered, 0.0), g0.masked_fill(~offered, 0.0)
        for row, (gi, ai) in enumerate(s1_rows):
            returns0[gi, ai] = (pi2[row] * g0[row]).sum()
        second = (pi2, q, (pi2 * q).sum(dim=1, keepdim=True), tried)
        logps.append(second_logp)
    loss, pi1, value = _exact_first(first_logp, index, returns0, first_weights)
    if second is not None:
        # each state after a first action weighs what the policy gives that action, mixed with a tenth
        # of uniform: pi(a0) alone is the gradient of the expected return, but a first action the policy
        # has turned from then never learns its second step, and is judged by an untrained one
        pi2, q, v1, tried = second
        share = 1.0 if state_weights == "uniform" else UNIFORM_SHARE
        weight = torch.as_tensor(
            [(1 - share) * float(pi1[gi, ai]) + share / len(firsts[gi]) for gi, ai in s1_rows],
            dtype=torch.float32,
        )
        if second_target is None:
            loss = loss - (weight[:, None] * pi2 * (q - v1) * tried).sum()
        else:  # cross-entropy to the Boltzmann target over the tried actions' returns
            target = torch.softmax((q / second_target).masked_fill(~offered, float("-inf")), dim=1)
            loss = loss - (weight[:, None] * target * tried).sum()
    greedy = [
        f[int(i)] for f, i in zip(firsts, torch.argmax(first_logp.gather(1, index), dim=1), strict=True)
    ]
    return loss / len(groups), _entropy(torch.cat(logps)), greedy, float(value.mean())
