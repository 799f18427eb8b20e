"""The shop without a browser: catalogue, goals and reward, the site, text mode in-process and over real HTTP."""
import random
import subprocess
import sys

import httpx
import pytest

import agentgym
from agentgym.envs.web.shop.catalog import Catalog, make_product
from agentgym.envs.web.shop.goals import Goal, GoalSampler, shop_reward, split_of
from agentgym.envs.web.shop.site import shared_site
from agentgym.envs.web.shop.textview import text_view
from agentgym.envs.web.shop_env import WebShopEnv

N = 2000  # products: enough for real search pages, quick to build


@pytest.fixture(scope="module")
def site():
    return shared_site(0, N)


@pytest.fixture(scope="module")
def server(site):
    from agentgym.envs.web.shop.app import shared_server

    return shared_server(site)


def run_oracle(env, seed, split="test", max_steps=30):
    obs, info = env.reset(seed=seed, options={"split": split})
    actions = []
    for _ in range(max_steps):
        action = env.oracle_action()
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated:
            return reward, info, actions, obs
    return 0.0, info, actions, obs


# ---------------------------------------------------------------------- catalogue, goals, reward
def test_catalogue_is_a_pure_function_of_seed_and_index():
    small, other_seed = Catalog(0, 50), Catalog(1, 50)
    assert small.products[:50] == [make_product(0, i) for i in range(50)]
    assert small.products[7] == Catalog(0, 200).products[7]          # sizes share their first products
    assert small.products[7] != other_seed.products[7]
    assert len({p.product_type for p in Catalog(0, 500).products}) >= 25
    with pytest.raises(ValueError, match="at least 10"):
        Catalog(0, 3)


def test_goal_splits_are_disjoint_by_target_product(site):
    sampler = GoalSampler(site.catalog)
    train = {sampler.goal("train", k).asin for k in range(300)}
    test = {sampler.goal("test", k).asin for k in range(100)}
    assert train and test and not train & test
    assert all(split_of(a) == "test" for a in test)
    goal = sampler.goal("test", 3)
    assert goal == sampler.goal("test", 3) and goal != sampler.goal("test", 4)
    assert goal.product_type in goal.instruction and f"{goal.price_upper:.2f}" in goal.instruction


def test_webshop_reward_worked_example():
    product = make_product(0, 0)
    kinds = dict(product.options)
    goal = Goal("g", "test", product.asin, product.category, product.product_type, product.attributes[:2],
                tuple((k, v[0]) for k, v in kinds.items()), product.price + 1, "i want ...", product.title)
    denom = 2 + len(kinds) + 1
    reward, parts = shop_reward(goal, product, {k: v[0] for k, v in kinds.items()})
    assert reward == pytest.approx(1.0) and sum(parts.values()) == pytest.approx(reward)
    reward, parts = shop_reward(goal, product, {})                      # no option chosen
    assert reward == pytest.approx(3 / denom) and parts["options"] == 0
    cheap = Goal(**{**goal.__dict__, "price_upper": product.price - 1})
    assert shop_reward(cheap, product, {})[1]["price"] == 0
    other_type = next(p for p in Catalog(0, 100).products if p.category != product.category)
    reward, parts = shop_reward(goal, other_type, {})
    assert reward == pytest.approx(sum(parts.values())) and reward <= 0.1 + 1e-9


# ---------------------------------------------------------------------- site and text view
def test_hostile_text_stays_text(site):
    hostile = '<a data-label="Buy Now" href="/evil">x</a> [Buy Now] <script>window.pwned=1</script>'
    goal = Goal(**{**site.goals.goal("test", 0).__dict__, "instruction": hostile})
    session = site.new_session(goal=goal)
    page = site.dispatch("GET", f"/s/{session.sid}/", {})
    assert "<script>window" not in page.html and "&lt;script&gt;" in page.html
    view = text_view(page.html)
    assert "[Buy Now]" in view.text and "buy now" not in view.clickables and "/evil" not in str(view.clickables)
    assert view.search_url == f"/s/{session.sid}/search"


def test_sessions_are_independent_and_bad_paths_are_pages(site):
    a, b = site.new_session("test", 1), site.new_session("test", 1)
    item = site.catalog.by_asin[a.goal.asin]
    page = site.dispatch("POST", f"/s/{a.sid}/buy/{item.asin}", {"o": "color:not-a-colour|junk"})
    assert a.done and not b.done and a.purchase.options == ()
    assert site.dispatch("POST", f"/s/{a.sid}/buy/{item.asin}", {}).html == page.html   # first buy counts
    assert site.dispatch("GET", f"/s/{b.sid}/item/NOPE", {}).status == 404
    assert site.dispatch("GET", "/s/unknown/", {}).status == 404
    assert site.dispatch("GET", "/etc/passwd", {}).status == 404
    assert site.dispatch("GET", f"/s/{b.sid}/search", {"q": "x" * 100_000, "page": "-3"}).status == 200


# ---------------------------------------------------------------------- text mode
def test_oracle_solves_held_out_instructions_in_process():
    env = agentgym.make("agentgym/WebShop-v0", num_products=N)
    results = [run_oracle(env, seed) for seed in range(20)]
    assert all(r == 1.0 and info["success"] for r, info, _, _ in results)
    _, info, _, obs = results[0]
    assert set(info["reward_components"]) == {"attributes", "options", "price"}
    assert "Thank you for shopping" in obs
    env.close()


def test_random_clicks_rarely_succeed():
    env = WebShopEnv(num_products=N, split="test")
    rng, wins = random.Random(0), 0
    for seed in range(60):
        obs, info = env.reset(seed=seed)
        for _ in range(15):
            action = rng.choice(info["admissible_actions"])
            action = action.replace("<query>", " ".join(rng.sample(obs.split(), 3)))
            obs, reward, terminated, _, info = env.step(action)
            if terminated:
                break
        wins += info["success"]
    assert wins / 60 < 0.05
    env.close()


def test_bad_actions_are_invalid_observations():
    env = WebShopEnv(num_products=N)
    obs, info = env.reset(seed=0)
    assert info["admissible_actions"][0] == "search[<query>]" and info["task_id"] == "train-0"
    for action in ["", "buy it", "click[Nope]", "search[]", "\x00" * 10_000, "click[" + "a" * 100_000 + "]"]:
        obs, reward, terminated, _, info = env.step(action)
        assert info["valid_action"] is False and reward == 0 and not terminated and obs.startswith("Invalid")
    obs, _, _, _, info = env.step("I think I should search. search[usb cable]")
    assert info["valid_action"] and "Page 1" in obs
    assert env.step("search[again]")[4]["valid_action"] is False          # no search bar on results
    env.close()


def test_http_mode_matches_in_process_step_for_step(server):
    local = WebShopEnv(num_products=N)
    remote = WebShopEnv(url=server.url, num_products=N)
    reward, info, actions, _ = run_oracle(local, 5)
    assert reward == 1.0
    obs_r, _ = remote.reset(seed=5, options={"split": "test"})
    obs_l, _ = local.reset(seed=5, options={"split": "test"})
    assert obs_r == obs_l
    for action in actions + ["click[Nope]"]:
        step_l, step_r = local.step(action), remote.step(action)
        assert step_l[0] == step_r[0] and step_l[1:4] == step_r[1:4]
        assert step_l[4]["anchor"] == step_r[4]["anchor"]
    assert step_r[4]["valid_action"] is False     # after the purchase
    local.close(), remote.close()


def test_concurrent_http_episodes_do_not_share_state(server):
    envs = [WebShopEnv(url=server.url, num_products=N, split="test") for _ in range(2)]
    for env, seed in zip(envs, (2, 3)):
        env.reset(seed=seed)
    # interleave: both walk their own oracle; sessions must not leak into each other
    done = [False, False]
    for _ in range(30):
        for i, env in enumerate(envs):
            if not done[i]:
                _, reward, done[i], _, info = env.step(env.oracle_action())
        if all(done):
            break
    assert all(done) and [e.transport.state(e.sid)["goal_id"] for e in envs] == ["test-2", "test-3"]
    sids = [env.sid for env in envs]
    for env in envs:
        env.close()
    assert [httpx.get(f"{server.url}/api/sessions/{sid}", timeout=30).status_code for sid in sids] == [404, 404]


def test_serve_shop_cli_serves_real_http(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "serve", "shop", "--port", "0", "--products", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert "serving a shop of 300 products at http://127.0.0.1:" in line, line
        url = line.split(" at ")[1].strip()
        env = WebShopEnv(url=url, num_products=300)
        reward, info, _, _ = run_oracle(env, 1)
        assert reward == 1.0
        sid = env.sid
        env.close()
        assert httpx.get(f"{url}/api/sessions/{sid}", timeout=30).status_code == 404     # close() ended the session
        assert httpx.post(f"{url}/api/sessions", content=b"junk", timeout=30).status_code == 400
        env = WebShopEnv(url=url, num_products=300, timeout_s=5)
        env.reset(seed=2)
        proc.terminate()
        proc.wait(10)
        obs, reward, terminated, _, info = env.step("search[usb cable]")     # the server is gone
        assert terminated and reward == 0 and not info["valid_action"] and "did not answer" in obs
        env.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_bad_config_is_a_one_line_error():
    with pytest.raises(agentgym.errors.ConfigError, match="unknown split"):
        WebShopEnv(num_products=N, split="holdout")
    out = subprocess.run([sys.executable, "-m", "agentgym", "serve", "shop", "--port", "70000"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--port must be between" in out.stderr and "Traceback" not in out.stderr


def test_success_reward_pays_only_an_exact_buy():
    """reward="success": the oracle's exact buys pay 1 as under the score; a near buy (the shopper's result, bought
    before any option is clicked) pays 0 where the score pays its fraction, which stays in the components as
    shop_score."""
    score_env = WebShopEnv(num_products=N, split="test")
    success_env = WebShopEnv(num_products=N, split="test", reward="success")
    assert run_oracle(success_env, 0)[0] == 1.0
    near = []
    for seed in range(12):
        rewards = []
        for env in (score_env, success_env):
            obs, info = env.reset(seed=seed)
            env.step(env.expert_action())           # the fair shopper's search
            env.step(env.expert_action())           # and the result it opens; then bought without options
            _, reward, terminated, _, info = env.step("click[Buy Now]")
            rewards.append((reward, terminated, info["success"], info["reward_components"].get("shop_score")))
        (score, done, won, _), (paid, done2, won2, kept) = rewards
        assert done and done2 and won == won2 and paid == float(won) and kept == pytest.approx(score)
        near += [score] if 0 < score < 1 else []
    assert near  # some near buys were seen, and each paid 0
    with pytest.raises(agentgym.errors.ConfigError, match="reward must be one of score, success"):
        WebShopEnv(num_products=N, reward="exact")
