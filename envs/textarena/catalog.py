"""The TextArena games agentgym plays (textarena 0.7), found by `survey.py`: every game the installed
version registers was made, reset and played offline; these are the ones that run. The rest, and why not,
are in `NOT_PLAYABLE` (and the family README). Ids are TextArena's; agentgym's are `env_id(game)`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Game:
    id: str            # TextArena's id, e.g. "Sudoku-v0-easy"
    players: int       # 1: single-player puzzle; 2: the agent against a fixed opponent

    @property
    def title(self) -> str:
        return self.id.split("-v0")[0]


SINGLE_PLAYER: tuple[str, ...] = (
    "2048-v0-ultra-easy", "2048-v0-mega-easy", "2048-v0-super-easy", "2048-v0-very-easy", "2048-v0-easy", "2048-v0",
    "2048-v0-hard", "2048-v0-very-hard", "2048-v0-extreme", "2048-v0-3x3", "2048-v0-5x5", "2048-v0-6x6",
    "2048-v0-8x8", "2048-v0-10x10", "Bandit-v0", "Bandit-v0-hard", "Blackjack-v0", "Blackjack-v0-long",
    "Countdown-v0", "Crosswords-v0", "Crosswords-v0-hardcore", "Cryptarithm-v0", "FifteenPuzzle-v0", "FrozenLake-v0",
    "FrozenLake-v0-random", "FrozenLake-v0-hardcore", "GuessTheNumber-v0", "GuessTheNumber-v0-hardcore",
    "LightsOut-v0", "LogicPuzzle-v0", "LogicPuzzle-v0-hard", "Mastermind-v0", "Mastermind-v0-hard",
    "Mastermind-v0-extreme", "Minesweeper-v0", "Minesweeper-v0-small", "Minesweeper-v0-medium",
    "Minesweeper-v0-hard", "PegJump-v0", "RushHour-v0", "Secretary-v0", "Secretary-v0-long", "Set-v0",
    "Slitherlink-v0", "Sokoban-v0", "Sudoku-v0-very-easy", "Sudoku-v0-easy", "Sudoku-v0", "Sudoku-v0-medium",
    "ThreeCardMonte-v0", "TowerOfHanoi-v0", "TowerOfHanoi-v0-medium", "TowerOfHanoi-v0-hard",
    "TowerOfHanoi-v0-hardcore", "TowerOfHanoi-v0-extreme",
)
TWO_PLAYER: tuple[str, ...] = (
    "Battleship-v0", "Battleship-v0-standard", "Battleship-v0-large", "Battleship-v0-extreme", "Briscola-v0",
    "Chopsticks-v0", "Chopsticks-v0-medium", "Chopsticks-v0-long", "ColonelBlotto-v0-small", "ColonelBlotto-v0",
    "ColonelBlotto-v0-large", "ColonelBlotto-v0-extreme", "ConnectFour-v0", "ConnectFour-v0-blind",
    "ConnectFour-v0-large", "Crusade-v0", "GameOfPureStrategy-v0", "GermanWhist-v0", "Golf-v0", "Golf-v0-medium",
    "HighSociety-v0", "IndianPoker-v0-short", "IndianPoker-v0", "IndianPoker-v0-medium", "IndianPoker-v0-long",
    "IndianPoker-v0-extreme", "IteratedMatchingPennies-v0", "IteratedRockPaperScissors-v0",
    "IteratedTwoThirdsAverage-v0", "KuhnPoker-v0", "KuhnPoker-v0-short", "KuhnPoker-v0-medium", "KuhnPoker-v0-long",
    "KuhnPoker-v0-extreme", "Nim-v0", "Nim-v0-medium", "Nim-v0-large", "Othello-v0-tiny", "Othello-v0-small",
    "Othello-v0", "Othello-v0-big", "Othello-v0-huge", "Othello-v0-hard", "PigDice-v0", "PigDice-v0-short",
    "PigDice-v0-long", "PigDice-v0-50", "PigDice-v0-100", "PigDice-v0-150", "PigDice-v0-200", "PigDice-v0-250",
    "PigDice-v0-300", "PigDice-v0-350", "PigDice-v0-400", "PigDice-v0-450", "PigDice-v0-500", "SimpleTak-v0",
    "SimpleTak-v0-medium", "SimpleTak-v0-large", "SimpleTak-v0-extreme", "Tak-v0", "Tak-v0-medium", "Tak-v0-hard",
    "TicTacToe-v0", "TwoDollar-v0", "UltimateTicTacToe-v0", "IteratedUltimatumGame-v0",
    "IteratedUltimatumGame-v0-alternate", "WildTicTacToe-v0", "LiarsDice-v0-small", "LiarsDice-v0",
    "LiarsDice-v0-large", "Poker-v0-small", "Poker-v0", "Poker-v0-long", "Poker-v0-extreme", "SantoriniBaseFixed-v0",
    "NewRecruit-v0",
)
GAMES: dict[str, Game] = {**{g: Game(g, 1) for g in SINGLE_PLAYER}, **{g: Game(g, 2) for g in TWO_PLAYER}}
_WHY_0 = "needs NLTK's 'words' corpus, downloaded at reset (no network here)"
_WHY_1 = 'needs an OpenRouter API key (an LLM host or judge)'
_WHY_2 = 'its module does not compile on Python 3.11 (f-strings that need 3.12)'
_WHY_3 = 'a reset (or a turn) takes over a minute here'
_WHY_4 = 'free-text turns: any text is a valid message, so bad input cannot be told from a move'
_WHY_5 = 'simultaneous moves: the game accepts any text and never flags a bad move'
_WHY_6 = 'data files or modules missing from the wheel'
_WHY_7 = 'crashes at reset (TextArena bug)'
_WHY_8 = 'the game shows no legal moves, so the random opponent cannot find one and forfeits at once'
NOT_PLAYABLE: dict[str, str] = {  # TextArena ids left out, and why (textarena 0.7.4, Python 3.11, offline)
    'Hangman-v0': _WHY_0,
    'Hangman-v0-hardcore': _WHY_0,
    'WordLadder-v0': _WHY_0,
    'WordLadder-v0-medium': _WHY_0,
    'WordLadder-v0-hard': _WHY_0,
    'Wordle-v0': _WHY_0,
    'Wordle-v0-hardcore': _WHY_0,
    'Wordle-v0-long': _WHY_0,
    'Wordle-v0-long-hardcore': _WHY_0,
    'WordSearch-v0': _WHY_0,
    'WordSearch-v0-hardcore': _WHY_0,
    'SpellingBee-v0-small': _WHY_0,
    'SpellingBee-v0': _WHY_0,
    'SpellingBee-v0-large': _WHY_0,
    'Codenames-v0': _WHY_0,
    'Codenames-v0-hardcore': _WHY_0,
    'LetterAuction-v0': _WHY_0,
    'LetterAuction-v0-medium': _WHY_0,
    'LetterAuction-v0-hard': _WHY_0,
    'DontSayIt-v0': _WHY_0,
    'DontSayIt-v0-hardcore': _WHY_0,
    'DontSayIt-v0-unlimited': _WHY_0,
    'WordChains-v0': _WHY_0,
    'GuessWho-v0': _WHY_1,
    'TwentyQuestions-v0': _WHY_1,
    'TwentyQuestions-v0-hardcore': _WHY_1,
    'Debate-v0': _WHY_1,
    'Debate-v0-medium': _WHY_1,
    'Debate-v0-long': _WHY_1,
    'ScenarioPlanning-v0': _WHY_1,
    'Klondike-v0': _WHY_2,
    'UltimateTexasHoldem-v0': _WHY_2,
    'Chess-v0': _WHY_2,
    'Chess-v0-long': _WHY_2,
    'Chess-v0-blind': _WHY_2,
    'Checkers-v0': _WHY_2,
    'Checkers-v0-long': _WHY_2,
    'ReverseTicTacToe-v0': _WHY_2,
    'IteratedStagHunt-v0': _WHY_2,
    'IteratedStagHunt-v0-randomized': _WHY_2,
    'Sokoban-v0-medium': _WHY_3,
    'Sudoku-v0-hard': _WHY_3,
    'Stratego-v0': _WHY_3,
    'IteratedPrisonersDilemma-v0': _WHY_4,
    'SimpleBlindAuction-v0-quick': _WHY_4,
    'SimpleBlindAuction-v0': _WHY_4,
    'SimpleBlindAuction-v0-rich': _WHY_4,
    'SimpleNegotiation-v0-short': _WHY_4,
    'SimpleNegotiation-v0': _WHY_4,
    'SimpleNegotiation-v0-long': _WHY_4,
    'TruthAndDeception-v0': _WHY_4,
    'TruthAndDeception-v0-long': _WHY_4,
    'TruthAndDeception-v0-extreme': _WHY_4,
    'Snake-v0': _WHY_5,
    'Snake-v0-standard': _WHY_5,
    'Snake-v0-large': _WHY_5,
    'Surround-v0': _WHY_5,
    'Surround-v0-standard': _WHY_5,
    'Surround-v0-large': _WHY_5,
    'UsedCarNegotiation-v0': _WHY_6,
    'UsedCarNegotiation-v0-strong-buyer': _WHY_6,
    'UsedCarNegotiation-v0-strong-seller': _WHY_6,
    'UsedCar-v0-balanced': _WHY_6,
    'ScorableGames-v0': _WHY_6,
    'BabyAiText-v0': _WHY_6,
    'CharacterConclave-v0': _WHY_7,
    'SecretMafia-v0': _WHY_7,
    'PublicGoodsGame-v0': _WHY_7,
    'Alquerque-v0': _WHY_8,
    'Breakthrough-v0-tiny': _WHY_8,
    'Breakthrough-v0-small': _WHY_8,
    'Breakthrough-v0': _WHY_8,
    'Breakthrough-v0-large': _WHY_8,
    'Breakthrough-v0-blind': _WHY_8,
    'Breakthrough-v0-long': _WHY_8,
    'LinesOfAction-v0': _WHY_8,
    'MemoryGame-v0': _WHY_8,
    'MemoryGame-v0-medium': _WHY_8,
    'MemoryGame-v0-hard': _WHY_8,
}


def env_id(game: str) -> str:
    """agentgym's id for a TextArena id: "Sudoku-v0-easy" -> "agentgym/TextArena-Sudoku-easy-v0"."""
    base, _, variant = game.partition("-v0")
    return f"agentgym/TextArena-{base}{variant}-v0"
