"""A card-reading router's logits on a few held-out items, split into their terms [backend: sim].

For the first test item of each domain named, every agent's logit is printed as the sum of the price
term ``(V h) . [price, Terminator flag]``, the domain-accuracy term ``w(h) * acc_a(s)`` and the rest
(the MLP head over ``[h, g, h * g]``; zero with ``cards_linear``). experiments/unseen-agents/README.md reads
it:

    python experiments/unseen-agents/unseen_logit_terms.py runs/unseen-agents/unseen-agents/held-out-s0/final
"""

from __future__ import annotations

import argparse

import torch

from puppeteer.agents.pool import load_pool
from puppeteer.envs.build import EnvConfig, build_env
from puppeteer.policies.puppeteer import PuppeteerPolicy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy", help="a saved card-reading policy (its final/ or best/ folder)")
    p.add_argument("--pool", default="sim-routing")
    p.add_argument("--suite", default="mix-routing")
    p.add_argument("--lam", type=float, default=0.05)
    p.add_argument("--domains", default="humaneval,math500,gsm8k")
    args = p.parse_args()
    pool = load_pool(args.pool)
    policy = PuppeteerPolicy.load(args.policy, pool)
    sc = policy.scorer
    settings = EnvConfig(mode="step", lam=args.lam, max_steps=1, min_steps=1, cost_model="usd")
    test = build_env(settings, pool=pool, suite=args.suite, split="test", n_tasks=40)
    names = [a.name for a in pool.agents]
    for domain in args.domains.split(","):
        i = next(k for k, t in enumerate(test.tasks) if t.domain == domain)
        obs, _ = test.reset(seed=1, options={"task_index": i})
        task, state, step, counts, mask, signals, surface, lam = policy.batch([policy.features(obs)])
        with torch.no_grad():
            total = sc(task, state, step, counts, mask, signals, surface, lam)[0]
            matched = sc.domain_accuracy(task)[0]
            p_domain = torch.softmax(sc.standardized(task) @ sc.domain_w + sc.domain_b, dim=-1)[0]
            x = sc.standardized(task)
            if sc.task_dims is not None:
                x = x @ sc.task_proj
            onehot = torch.nn.functional.one_hot(step.clamp(max=sc.max_steps), sc.max_steps + 1).float()
            parts = [x, state, onehot] + ([surface.float()] if sc.n_surface else [])
            first, act, second = sc.state_net
            h = second(act(first(torch.cat(parts, dim=-1))))
            v = sc.card_logits(h)[0]
            price = v @ sc.card_inputs()[:, sc.card_linear].T
            w = float(sc.match_logit(h)[0, 0])
        head = f"{domain} p(domain) {p_domain.numpy().round(2)} w_match {w:.3f}"
        print(f"{head} V(price, T) {v.numpy().round(2)}")
        for k, name in enumerate(names):
            rest = float(total[k] - price[k] - w * matched[k])
            print(
                f"  {name:16s} total {total[k]:7.3f} price {price[k]:6.3f} "
                f"matched {matched[k]:5.2f} -> {w * float(matched[k]):6.3f}  rest {rest:6.3f}"
            )


if __name__ == "__main__":
    main()
