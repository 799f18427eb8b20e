"""Web env speed, side by side: WebShop text mode in-process and over HTTP, the browser mode, and the
catalogue build time at 100k products.

    python benchmarks/web.py                    # 10k-product shop, 2000 text steps, 100 browser steps
    python benchmarks/web.py --products 100000 --build 100000

Steps are the oracle's (search, open, choose options, buy) mixed with random clicks, so every page kind
is served. Targets (issue #12): text in-process >= 1,000 steps/s, browser >= 10 steps/s.
"""
from __future__ import annotations

import argparse
import random
import time

import agentgym
from agentgym.envs.web.shop.app import shared_server
from agentgym.envs.web.shop.catalog import Catalog
from agentgym.envs.web.shop.site import shared_site


def policy_step(env, info, rng: random.Random) -> str:
    if rng.random() < 0.7:
        return env.unwrapped.oracle_action() or "click[Back to Search]"
    clicks = [a for a in info.get("admissible_actions", []) if a.startswith("click") and "Buy" not in a]
    return rng.choice(clicks) if clicks else env.unwrapped.oracle_action()


def browser_step(env, rng: random.Random) -> str:
    return env.unwrapped.oracle_action() if rng.random() < 0.8 else rng.choice(["scroll(down)", "scroll(up)"])


def run(env, steps: int, pick) -> tuple[float, int, int]:
    """(steps/s, steps, episodes) over `steps` steps, resets included in the time."""
    rng = random.Random(0)
    episode, done = 0, 0
    obs, info = env.reset(seed=episode, options={"split": "test"})
    start = time.perf_counter()
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(pick(env, info, rng))
        if terminated or truncated:
            episode += 1
            done += 1
            obs, info = env.reset(seed=episode, options={"split": "test"})
    return steps / (time.perf_counter() - start), steps, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", type=int, default=10_000, help="catalogue size of the shop")
    parser.add_argument("--steps", type=int, default=2000, help="text-mode steps per transport")
    parser.add_argument("--browser-steps", type=int, default=100)
    parser.add_argument("--build", type=int, default=100_000, help="catalogue size to time building (0: skip)")
    args = parser.parse_args()

    start = time.perf_counter()
    site = shared_site(0, args.products)
    setup_s = time.perf_counter() - start
    server = shared_server(site)
    rows = []
    text = agentgym.make("agentgym/WebShop-v0", num_products=args.products, max_turns=15)
    rows.append(("text, in-process", *run(text, args.steps, policy_step)))
    http = agentgym.make("agentgym/WebShop-v0", url=server.url, num_products=args.products, max_turns=15)
    rows.append(("text, HTTP (uvicorn, loopback)", *run(http, args.steps // 4, policy_step)))
    browser = agentgym.make("agentgym/WebShop-Browser-v0", num_products=args.products, max_turns=30)
    browser.reset(seed=0)   # the browser's start is a one-off, not a step
    rows.append(("browser (Chromium, AX tree)", *run(browser, args.browser_steps,
                                                      lambda env, info, rng: browser_step(env, rng))))
    for env in (text, http, browser):
        env.close()

    print(f"shop of {args.products:,} products (catalogue + BM25 index built in {setup_s:.1f} s)")
    print(f"{'mode':34s} {'steps/s':>9s} {'steps':>7s} {'episodes':>9s} {'vs in-process':>14s}")
    base = rows[0][1]
    for name, rate, steps, episodes in rows:
        print(f"{name:34s} {rate:9.1f} {steps:7d} {episodes:9d} {rate / base:13.3f}x")
    if args.build:
        start = time.perf_counter()
        Catalog(seed=1, size=args.build)
        catalog_s = time.perf_counter() - start
        from agentgym.tools.retrieval.bm25 import BM25Index
        from agentgym.tools.retrieval.corpus import Corpus, Document

        catalog = Catalog(seed=1, size=args.build)
        start = time.perf_counter()
        BM25Index(Corpus(Document(p.asin, p.title, p.index_text()) for p in catalog.products))
        index_s = time.perf_counter() - start
        print(f"catalogue build at {args.build:,} products: {catalog_s:.2f} s (+ BM25 index {index_s:.2f} s)")


if __name__ == "__main__":
    main()
