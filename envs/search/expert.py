"""A fair search expert: it reads the question and the passages its searches returned, nothing else.

The oracle (`SearchEnv.oracle_action`) looks up the question's supporting documents in the hidden world
and searches their titles; a model cloned from it never sees how a query follows from what was read.
`SearchExpert` parses the question's noun phrase ("the birthplace of the author of The X Hours") into a
start name and the relations to follow, searches the start name, reads the relation's value in the
passage titled with that name ("... by the author Quumaer Lyskiburk."), searches that, and so on; then
answers with the last name or the year the question asks for (comparisons: the earlier of two chains).
Its queries are free text built from the question and the passages, as the agent's must be. It knows the
sentence shapes the generated world's documents use (world.render), as a reader knows English; on a real
corpus it has no parse and gives up (None: the demonstration fails and is skipped).

    expert = SearchExpert()
    expert.observe("Question: ...")        # then observe(obs) after every step
    text = expert.act(render_calls)        # a search call, an <answer> tag, or None (no path)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

# relation phrases of envs/search/questions.py, outermost first; the group is the inner phrase
_RELATIONS = (
    (re.compile(r"^the city where (.+) has its headquarters$"), "headquarters"),
    (re.compile(r"^the country in which (.+) lies$"), "country"),
    (re.compile(r"^the (?:author|director|composer|painter) of (.+)$"), "creator"),
    (re.compile(r"^the (birthplace|employer|founder|capital) of (.+)$"), ""),
)
_ATTRIBUTE_Q = re.compile(r"^In what year (?:was|did) (.+) (?:born|appear|founded|established)\?$")
_NAME_Q = re.compile(r"^(?:Who|What) is (.+)\?$")
_COMPARE_Q = re.compile(r"^(?:Who was born|Which appeared|Which was founded|Which city was founded) earlier, "
                        r"(.+) or (.+)\?$")
# the facts of a document, by the sentence shapes of envs/search/world.render
_FACTS = (
    re.compile(r"^(?P<name>.+?) was an? \w+ born in (?P<year>\d+) in the city of (?P<birthplace>.+?)\. "
               r"(?P=name) worked for the (?P<employer>.+?)\."),
    re.compile(r"^(?P<name>.+?) is an? \w+ from (?P<year>\d+) by the \w+ (?P<creator>.+?)\. It is about"),
    re.compile(r"^The (?P<name>.+?) is an? [\w ]+? founded in (?P<year>\d+) by (?P<founder>.+?)\. "
               r"Its headquarters are in (?P<headquarters>.+?)\."),
    re.compile(r"^(?P<name>.+?) is a city in (?P<country>.+?), founded in (?P<year>\d+)\."),
    re.compile(r"^(?P<name>.+?) is a country established in (?P<year>\d+)\. Its capital is (?P<capital>.+?)\."),
)
_QUESTION = re.compile(r"^Question: (.+?)\s*$", re.M)
_HIT = re.compile(r"^\[\d+\] (?P<title>.+?) \(doc [^)]*\)\n(?P<text>.+)$", re.M)
_SEARCHED = re.compile(r'^Results for "(.+?)":$', re.M)


@dataclass
class Chain:
    """Follow `relations` (innermost first) from the entity named `start`."""

    start: str
    relations: list[str]


def parse_phrase(phrase: str) -> Chain:
    """ "the birthplace of the author of The X Hours" -> Chain("The X Hours", ["creator", "birthplace"])."""
    relations: list[str] = []
    while True:
        for pattern, relation in _RELATIONS:
            m = pattern.match(phrase)
            if m:
                relations.insert(0, relation or m.group(1))
                phrase = m.group(m.lastindex or 1)
                break
        else:
            return Chain(phrase, relations)


def parse_question(question: str) -> tuple[str, list[Chain]] | None:
    """(what to answer: "name" | "year" | "earlier", the chains to follow), or None for another shape."""
    q = question.strip()
    m = _COMPARE_Q.match(q)
    if m:
        return "earlier", [parse_phrase(m.group(1)), parse_phrase(m.group(2))]
    m = _ATTRIBUTE_Q.match(q)
    if m:
        return "year", [parse_phrase(m.group(1))]
    m = _NAME_Q.match(q)
    if m:
        return "name", [parse_phrase(m.group(1))]
    return None


def parse_facts(text: str) -> dict[str, str]:
    """The facts a document's text states ({} when it has none of the known shapes)."""
    for pattern in _FACTS:
        m = pattern.match(text.strip())
        if m:
            return {k: v for k, v in m.groupdict().items() if v is not None}
    return {}


def parse_hits(observation: str) -> dict[str, str]:
    """{title (lowercased): passage text} of a search result."""
    return {m.group("title").lower(): m.group("text") for m in _HIT.finditer(observation)}


@dataclass
class SearchExpert:
    """Scripted reader over the question and the passages (see the module docstring)."""

    ask: str = ""
    chains: list[Chain] = field(default_factory=list)
    read: dict[str, dict[str, str]] = field(default_factory=dict)  # name (lowercased) -> its document's facts
    tried: dict[str, int] = field(default_factory=dict)            # name (lowercased) -> searches of it
    answered: bool = False
    lost: bool = True                                               # no question parsed: no path

    def observe(self, observation: str) -> None:
        question = _QUESTION.search(observation)
        if question:  # a new episode
            self.__init__()  # type: ignore[misc]
            parsed = parse_question(question.group(1))
            if parsed:
                self.ask, self.chains = parsed
                self.lost = False
            return
        for title, text in parse_hits(observation).items():
            facts = parse_facts(text)
            if facts and facts["name"].lower() == title:
                self.read.setdefault(title, facts)

    def _follow(self, chain: Chain) -> tuple[str, dict[str, str] | None]:
        """(the name reached so far, its facts if read): walks the chain as far as the passages allow."""
        name = chain.start
        for relation in chain.relations:
            facts = self.read.get(name.lower())
            if facts is None or relation not in facts:
                return name, facts
            name = facts[relation]
        return name, self.read.get(name.lower())

    def act(self, render_calls: Callable[[Sequence[tuple[str, dict[str, Any]]]], str]) -> str | None:
        """The next action: a search for the first name not yet read, else the answer; None: no path."""
        if self.lost or self.answered:
            return None
        ends = [self._follow(c) for c in self.chains]
        for (name, facts), chain in zip(ends, self.chains):
            last = name.lower() == self._end_name(chain).lower()
            if facts is None and not (self.ask == "name" and last):
                return self._search(name, render_calls)
        if self.ask == "name":
            answer = ends[0][0]
        elif self.ask == "year":
            answer = (ends[0][1] or {}).get("year", "")
        else:
            years = [(int((f or {}).get("year", "0")), name) for name, f in ends]
            answer = min(years)[1]
        if not answer:
            self.lost = True
            return None
        self.answered = True
        return f"<answer>{answer}</answer>"

    def _end_name(self, chain: Chain) -> str:
        """The chain's last name if every relation could be followed, else "" (not reached yet)."""
        name = chain.start
        for relation in chain.relations:
            facts = self.read.get(name.lower())
            if facts is None or relation not in facts:
                return ""
            name = facts[relation]
        return name

    def _search(self, name: str, render_calls: Callable[[Sequence[tuple[str, dict[str, Any]]]], str]) -> str | None:
        tries = self.tried.get(name.lower(), 0)
        if tries >= 2:  # searched twice (the second time for 10 passages) and its page never came back
            self.lost = True
            return None
        self.tried[name.lower()] = tries + 1
        return render_calls([("search", {"query": name} if tries == 0 else {"query": name, "k": 10})])
