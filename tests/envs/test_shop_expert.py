"""The fair shopper reads only the pages the agent reads (the shop's text mode), and still buys right."""
from __future__ import annotations

import agentgym
from agentgym.envs.web.shop.expert import ShopExpert, Want, parse_instruction
from expert_episodes import play


def test_fair_shopper_buys_the_right_product_on_train_goals():
    """Stated rate: >= 95% of train goals within 15 turns (measured 197/200 on seeds 0-199 of a 1000-product
    shop, 97/100 on test goals; the misses ran out of turns after trying several products)."""
    env = agentgym.make("agentgym/WebShop-v0", num_products=1000)
    results = [play(env, seed, {"split": "train"}, max_turns=15) for seed in range(40)]
    assert sum(ok for ok, _ in results) >= 37
    assert any("click[Features]" in actions for _, actions in results)  # it checks what titles do not show


def test_shopper_never_reads_the_goal_record():
    """Replacing the goal's target (asin, title, options: what the oracle reads) with garbage before every
    action changes nothing the shopper does."""
    env = agentgym.make("agentgym/WebShop-v0", num_products=1000)

    def scramble(base):
        base.goal = {**base.goal, "target": {"asin": "B0XXXXXXXX", "title": "garbage", "options": {"size": "x"}}}

    for seed in range(8):
        ok, honest = play(env, seed, {"split": "train"}, max_turns=15)
        _, blind = play(env, seed, {"split": "train"}, max_turns=15, before_each_step=scramble)
        assert blind == honest and honest[0].startswith("search[")
        assert ok or len(honest) == 15


def test_shopper_reads_only_text():
    e = ShopExpert()
    e.observe("WebShop [SEP] Instruction: [SEP] find me a moisturizer, cruelty free and natural ingredients, "
              "size xx-large, under 20.00 dollars")
    assert e.act(["search[<query>]"]) == "search[cruelty free natural ingredients moisturizer]"
    e.observe("Instruction: [SEP] find me ... [SEP] [Back to Search] [SEP] Page 1 (Total results: 50) [SEP] [Next >] "
              "[SEP] [B0AAAAAAAA] [SEP] Oak Moisturizer, Vegan, Cruelty Free [SEP] $11.43 [SEP] [B0BBBBBBBB] [SEP] "
              "Elm Moisturizer, Natural Ingredients, Cruelty Free [SEP] $30.00 [SEP] [B0CCCCCCCC] [SEP] "
              "Fir Moisturizer, Natural Ingredients, Cruelty Free [SEP] $9.00")
    clicks = ["click[Back to Search]", "click[Next >]", "click[B0AAAAAAAA]", "click[B0BBBBBBBB]", "click[B0CCCCCCCC]"]
    assert e.act(clicks) == "click[B0CCCCCCCC]"  # both attributes shown, under the price bound
    item = ["click[Back to Search]", "click[< Prev]", "click[large]", "click[xx-large]", "click[Features]",
            "click[Buy Now]"]
    e.observe("Instruction: [SEP] x [SEP] [Back to Search] [SEP] [< Prev] [SEP] size [SEP] [large] [SEP] [xx-large] "
              "[SEP] Fir Moisturizer, Natural Ingredients, Cruelty Free [SEP] Price: $9.00 [SEP] [Buy Now]")
    assert e.act(item) == "click[xx-large]"
    assert e.act(item) == "click[Buy Now]"


def test_a_product_without_the_asked_attribute_is_left_for_the_next():
    e = ShopExpert()
    e.observe("WebShop [SEP] Instruction: [SEP] i need vegan moisturizer that costs less than 20.00 dollars")
    e.act(["search[<query>]"])
    results = ("Instruction: [SEP] x [SEP] Page 1 (Total results: 2) [SEP] [B0AAAAAAAA] [SEP] Oak Moisturizer, Oil "
               "Free, Soft [SEP] $5.00 [SEP] [B0BBBBBBBB] [SEP] Elm Moisturizer, Oil Free, Soft [SEP] $6.00")
    e.observe(results)
    assert e.act(["click[B0AAAAAAAA]", "click[B0BBBBBBBB]"]) == "click[B0AAAAAAAA]"
    e.observe("Instruction: [SEP] x [SEP] [< Prev] [SEP] Oak Moisturizer, Oil Free, Soft [SEP] Price: $5.00 [SEP] "
              "[Features] [SEP] [Buy Now]")
    assert e.act(["click[< Prev]", "click[Features]", "click[Buy Now]"]) == "click[Features]"
    e.observe("Instruction: [SEP] x [SEP] [< Prev] [SEP] Oil free: designed to be oil free from day one.")
    assert e.act(["click[< Prev]"]) == "click[< Prev]"
    e.observe("Instruction: [SEP] x [SEP] [< Prev] [SEP] Oak Moisturizer, Oil Free, Soft [SEP] Price: $5.00 [SEP] "
              "[Features] [SEP] [Buy Now]")
    assert e.act(["click[< Prev]", "click[Features]", "click[Buy Now]"]) == "click[< Prev]"  # not vegan
    e.observe(results)
    assert e.act(["click[B0AAAAAAAA]", "click[B0BBBBBBBB]"]) == "click[B0BBBBBBBB]"


def test_instruction_parser():
    assert parse_instruction("i'm looking for a wireless wireless mouse, black color, and price lower than 30.00 "
                             "dollars") == Want("wireless mouse", ("wireless",), ("black",), 30.0)
    assert parse_instruction("find me a hoodie, organic cotton, size x-large, under 40.00 dollars") == Want(
        "hoodie", ("organic cotton",), ("x-large",), 40.0)  # "cotton" is not read twice, "large" not for x-large
    assert parse_instruction("buy something nice") is None
    assert ShopExpert().act(["search[<query>]"]) is None  # no instruction read: no path, never a guess
