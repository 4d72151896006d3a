"""Train the step-wise puppeteer (Hydra): python scripts/train.py pool=sim-paper suite=mix-paper lam=0.2"""

from puppeteer.train.hydra_entry import hydra_main

if __name__ == "__main__":
    try:
        hydra_main()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
