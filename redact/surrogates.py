"""Pseudonyms that keep a workload's shape: same type, same format, same token count.

Owns :class:`Surrogates`. The surrogate of a value depends only on the key, the value and its
entity type, so one original maps to one surrogate everywhere (a keyed HMAC seeds the choices;
the mapping is cached per trace).

How a surrogate is made: the value is cut into the tokenizer's pre-tokenizer pieces (the units
BPE never merges across) and each piece is replaced by one of the same kind with the same token
count, tried up to :data:`TRIES` times. A piece is counted as it stands in the value, with the
space the pre-tokenizer leaves in front of it (" 919" is not "919" in tokens); a name's word bare
and after a space, so that its choice does not depend on where it stands. The pieces:

- letters: for PERSON and LOCATION a real first or last name, for the parts of an email address
  a name or an English word, with the original's capitalization, chosen by an HMAC of the
  lower-cased piece, so "Smith" gets the same name in "John Smith" and in "Mr. Smith": first
  among all the pool's words with the piece's token counts (:meth:`Surrogates._pool_word`), else
  in up to TRIES draws (after half of them, two words run together); for keys and other secrets
  random letters of the same case, character by character (after half the tries, a word of the
  same length: a mnemonic run such as an IBAN's bank code is few tokens);
- digits: random digits of the same length; other characters are kept;
- a piece none of these matched is built from the tokenizer's vocabulary
  (:meth:`Surrogates._compose`): letter tokens of its case, or digit tokens, run together, as many
  as its count asks (the length kept for keys, postcodes and numbers), up to
  :data:`COMPOSE_TRIES` draws;
- kept as they are in names and addresses: runs of one or two letters (initials, state codes);
  in addresses and places also street words (:data:`redact.addresses.STREET_WORDS`: "Street",
  "rue", "Straße", "Calle", "Suite", "Apt", "-ku"...), never in a person's name or an email
  ("Park" and "Hill" are surnames too).

An address (``STREET_ADDRESS``) keeps its shape, so that it is found as an address again:

- street and city names get names of the "place" pool (Faker's first and last names, chosen by an
  HMAC of the word as for PERSON), each counted as it stands in the address, not also bare;
- a postcode with letters (UK "NW1 6XE", Canada "H3A 1A1", Netherlands "1012 AB") and a house
  number with a letter ("221B") get random letters and digits in the same places;
- digits get random digits (a US ZIP, "10115", Japan's "160-0023"); ordinals keep their ending
  ("5th", "3º");
- a German compound keeps its street word and gets a name before it ("Hauptstraße" ->
  "Lopezstraße");
- Japanese script: the characters that make the shape (都道府県市区町村郡, 丁目, 番地, 号, 〒:
  :data:`redact.addresses.JP_KEPT`) and the long-vowel mark are kept; every other kanji,
  hiragana or katakana gets one of its own script (kanji from :data:`_KANJI`, common in place
  names), drawn first among those with the same token count on their own; the run's token count
  is checked as a whole.

Measured on ``tests/unit/redact/test_addresses.py``'s 332 addresses of the eight countries: the
token count is kept for 330 with GPT-2's tokenizer and 329 with Qwen2's, and each surrogate is
found whole as an address again (1,000 Faker addresses: 99.1% and 99.2%).

Then the type's format is restored: a card number's Luhn check (on its last digit, or the
nearest before it that keeps the token count), an IBAN's check digits, IPv4
octets within 0-255 (an IPv6 address's IPv4 tail too; its ``%zone``, a ``/prefix`` and, in an
address of five or more groups, its /32 routing prefix, the first two groups, kept), a
phone number's ``+`` and country code, ``00`` or first digit (its layout, :mod:`redact.shapes`),
an SSN's valid area, a key's known prefix (``sk-proj-``, ``ghp_``,
``AKIA``...), a JWT's header, a PEM block's BEGIN / END lines and an email's top-level domain are
kept, and so is a public mail provider's whole domain (:data:`PUBLIC_MAIL_DOMAINS`).

The whole surrogate's token count is checked (in its own right and after a space) once every
piece matched. A round in which a piece found no match tries again only the pieces that missed
(those that matched are kept); a round whose pieces all matched but whose whole did not starts
afresh. When none of :data:`_WHOLE_TRIES` rounds matches, the last one is used and counted in
:attr:`Surrogates.exceptions` (and :meth:`Surrogates.make` says so).
"""

from __future__ import annotations

import random
import re
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from redact.key import RedactionKey
from redact.addresses import DE_COMPOUND_ENDINGS, JP_KEPT, STREET_WORDS
from redact.national_ids import NATIONAL_ID_ENTITIES
from redact.spelled import DIGIT_WORDS, SPELLED_SEPARATOR

# words of an address or place that name no one: kept as they are
KEPT_WORDS = STREET_WORDS
# the entities whose surrogates keep KEPT_WORDS
_PLACE_ENTITIES = frozenset({"LOCATION", "STREET_ADDRESS"})

__all__ = ["TRIES", "WORD_ENTITIES", "Surrogates"]

TRIES = 64
# surrogates (and token counts) remembered; a capture with more distinct values recomputes some
CACHE_VALUES = 1_000_000
# email domains shared by millions of people: kept, as they identify no one
PUBLIC_MAIL_DOMAINS = frozenset(
    {
        "gmail.com",
        "googlemail.com",
        "yahoo.com",
        "outlook.com",
        "hotmail.com",
        "live.com",
        "icloud.com",
        "me.com",
        "aol.com",
        "proton.me",
        "protonmail.com",
        "gmx.com",
        "gmx.de",
        "mail.com",
        "yandex.ru",
        "qq.com",
        "163.com",
        "example.com",
        "example.org",
        "example.net",
    }
)
_WHOLE_TRIES = 16
# pools whose words are matched bare and after a space wherever they stand (see Surrogates._piece)
_WORD_POOLS = frozenset({"name", "word"})
WORD_ENTITIES = frozenset({"PERSON", "LOCATION"})

_KEY_PREFIX = re.compile(
    r"^(?:sk-ant-(?:api|admin)\d{2}-|sk-(?:proj-|svcacct-|admin-|None-)?|gh[pousr]_|github_pat_"
    r"|AKIA|ASIA|ABIA|ACCA|AIza|ya29\.|xox[abposr]-|(?:sk|rk|pk)_(?:live|test)_|hf_"
    r"|[a-z]{2,8}_(?:v\d+_)?(?=[A-Za-z0-9]{32,}))"
)
_PEM_LINE = re.compile(r"^-----(?:BEGIN|END) [A-Z0-9 ]+-----$")
_LETTERS = re.compile(r"[^\W\d_]+")
_DIGITS = "0123456789"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_RUNS = re.compile(r"[^\W\d_]+|\d+|[\W_]+")
_ASCII_LETTERS = re.compile(r"[A-Za-z]+")
_ASCII_DIGITS = re.compile(r"[0-9]+")
# how vocabularies mark a token that starts after a space (byte-level BPE, SentencePiece)
_SPACE_MARKS = ("\u0120", "\u2581")
# a piece that _compose can build: what leads it (a space, a punctuation mark), then letters
_LEAD = re.compile(r"([\W_]*)([^\W\d_]+)")
_DIGIT_LEAD = re.compile(r"([\W_]*)(\d+)")
# draws of vocabulary tokens for a piece no word or random draw matched
COMPOSE_TRIES = 200
# kept in a phone number: "+" and the country code, an international "00" or a trunk "0" prefix,
# else the first digit (a layout such as India's 5-5 mobiles or Spain's 3-3-3 starts with given digits)
_PHONE_HEAD = re.compile(r"\(?(?:\+ ?\d{1,3}|00|\d)?")
_IP_SUFFIX = re.compile(r"(?:%[^/]*)?(?:/\d+)?$")
_IPV4_TAIL = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}$")
_IPV6_PREFIX = re.compile(r"[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:(?!:)")
# kanji common in Japanese place names (none of JP_KEPT): Japanese-script surrogates draw from these
_KANJI = (
    "山川田中野原松本井上下大小東西南北高橋木林森石岡島崎宮沢浜谷藤長新広平安福吉和清水池沼津江湖"
    "海港坂岩尾根口内外前後里城宿泉浦瀬戸門寺神園花桜梅竹杉柳桑菊葉青赤白黒金銀光明日月星風雲雨雪"
    "春夏秋冬朝夕千万百旭昭栄富豊穂稲麦米秀英真美代賀茨栃群埼葛飾墨目品渋練足荒板台鶴亀龍鳳伏見堀丸"
    "駒込巣鴨蒲荻窪祥佐加久志多恵留羽生成辺宇治奈良仙札幌函館盛形潟甲静岐阜彦根"
)
_KANA = {
    "katakana": "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン"
    "ガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポ",
    "hiragana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわん",
}
_CJK_RUN = "\u3041-\u3096\u30a1-\u30fc\u3400-\u4dbf\u4e00-\u9fff々〆ヵヶ"
# an address's parts that are not shaped word by word (see the module docstring): a postcode with
# letters or a house number with one (random characters), a Japanese-script run, a German
# compound (its street word kept); each with the space in front of it
_ADDRESS_PARTS = re.compile(
    r"(?P<random>[ \t]?(?<![A-Za-z0-9])(?:[A-Z]{1,2}\d[A-Z\d]?[ \t]?\d[A-Z]{2}"
    r"|[A-Z]\d[A-Z][ \t-]?\d[A-Z]\d|\d{4}[ \t]?[A-Z]{2}|\d{1,5}[A-Za-z])(?![A-Za-z0-9]))"
    rf"|(?P<cjk>[ \t]?[{_CJK_RUN}]+)"
    r"|(?P<compound>[ \t]?(?<![^\W\d_-])[^\W\d_]{2,}?"
    rf"(?P<ending>(?i:{'|'.join(re.escape(e) for e in DE_COMPOUND_ENDINGS)}))(?![^\W\d_]))"
)


def _random_letters(run: str, rng: random.Random) -> str:
    """Random letters in place of ``run``'s: upper case for upper, lower for lower; other letters
    (accented, other scripts) kept."""
    n = len(run)
    upper, lower = rng.choices(_UPPER, k=n), rng.choices(_LOWER, k=n)
    return "".join(u if c.isupper() else lo if c.islower() else c for c, u, lo in zip(run, upper, lower))


def _split_length(total: int, parts: int, longest: int, rng: random.Random) -> list[int]:
    """``parts`` lengths of 1 to ``longest`` adding up to ``total`` where they can (else as near
    as they can), spread at random."""
    out = [1] * parts
    room = [i for i in range(parts) if longest > 1]
    for _ in range(max(0, total - parts)):
        if not room:
            break
        i = rng.randrange(len(room))
        out[room[i]] += 1
        if out[room[i]] == longest:
            room[i] = room[-1]
            room.pop()
    return out


def _token_case(tok: str) -> str | None:
    """A vocabulary token's case, for :meth:`Surrogates._letter_tokens`: "lower", "upper",
    "title", or None (mixed)."""
    return "lower" if tok.islower() else "upper" if tok.isupper() else "title" if tok[1:].islower() else None


def _case_of(word: str) -> str:
    if word.isupper() and len(word) > 1:
        return "upper"
    if word[:1].isupper():
        return "title"
    return "lower"


def _apply_case(word: str, case: str) -> str:
    return word.upper() if case == "upper" else word.capitalize() if case == "title" else word.lower()


def _pools() -> dict[str, list[str]]:
    """Word pools: "name" (Faker's en_US first and last names) for PERSON and LOCATION, "place"
    (the same names) for the words of a street address, "word" (those and Faker's English word
    list) for the parts of an email address."""
    from faker.providers.lorem import en_US as lorem
    from faker.providers.person import en_US as person

    names = {w for w in (*person.Provider.first_names, *person.Provider.last_names) if w.isalpha() and w.isascii()}
    words = names | {w for w in lorem.Provider.word_list if w.isalpha() and w.isascii()}
    name_list = sorted(names)
    return {"name": name_list, "place": name_list, "word": sorted(words)}


class Surrogates:
    """Keyed, cached, shape-keeping surrogates under one tokenizer (see the module docstring)."""

    def __init__(self, key: RedactionKey, tokenizer: Any):
        self.key = key
        self.tok = tokenizer
        self.pools = _pools()
        self._by_length: dict[int, list[str]] = {}
        for word in self.pools["word"]:
            self._by_length.setdefault(len(word), []).append(word)
        # (entity, value) -> surrogate, least recently used first; a surrogate is a function of
        # the key and the value, so the bound costs recomputation, never consistency
        self._cache: OrderedDict[tuple[str, str], tuple[str, bool]] = OrderedDict()
        self._ntok_cache: dict[str, int] = {}
        self.exceptions: Counter[str] = Counter()  # entity -> values whose token count changed
        # while a surrogate is made: its pieces matched so far, and whether one found no match
        self._matched: dict[tuple[str, str | None, bool], str] = {}
        self._cut: dict[str, list[str]] = {}  # string -> its pre-tokenizer pieces
        self._missed = False
        self._kept: frozenset[str] = frozenset()  # words kept as they are (KEPT_WORDS in places)
        self._cjk_pools: dict[str, dict[int, list[str]]] = {}  # script -> token count -> characters
        self._letters: dict[str, dict[int, list[str]]] | None = None  # see _letter_tokens
        self._indexes: dict[tuple[str, str], tuple[dict, dict, dict]] = {}  # see _pool_index

    def ntok(self, text: str) -> int:
        n = self._ntok_cache.get(text)
        if n is None:
            n = len(self.tok.encode(text, add_special_tokens=False).ids)
            if len(self._ntok_cache) < CACHE_VALUES:
                self._ntok_cache[text] = n
        return n

    def _rng(self, label: str, value: str) -> random.Random:
        return random.Random(self.key.digest(label, value))

    def _pieces(self, value: str) -> list[str]:
        got = self._cut.get(value)  # while a surrogate is made, each round cuts the same strings
        if got is not None:
            return got
        pre = self.tok.pre_tokenizer
        if pre is None:
            return [value]
        cuts = [start for _, (start, _) in pre.pre_tokenize_str(value)] + [len(value)]
        got = self._cut[value] = [value[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
        return got

    # -- pieces ----------------------------------------------------------------------------------

    def _pool_order(self, pool: str, letters: str) -> list[str]:
        """The first TRIES words of ``pool`` to try for ``letters``, fixed by its keyed HMAC
        (lower-cased, so "SMITH" and "Smith" get the same word)."""
        words = self.pools[pool]
        return self._rng(pool, letters.lower()).sample(words, TRIES)

    def _count_once(self, piece: str, first: bool) -> tuple[int, int]:
        """:meth:`_count` of a string that will not be counted again (not cached)."""
        enc = self.tok.encode
        return (
            len(enc(piece, add_special_tokens=False).ids),
            len(enc(" " + piece, add_special_tokens=False).ids) if first else 0,
        )

    def _count(self, piece: str, first: bool) -> tuple[int, int]:
        # a value's first piece may follow a space in the text, where BPE can merge differently
        return (self.ntok(piece), self.ntok(" " + piece) if first else 0)

    def _piece(self, piece: str, pool: str | None, rng: random.Random, first: bool) -> str:
        """A piece of the same kind and token count (up to TRIES tries)."""
        done = self._matched.get((piece, pool, first))
        if done is not None:
            return done
        if not any(c.isalnum() for c in piece):  # punctuation and spaces are kept
            return piece
        # a word's choice must not depend on where it stands (so "Smith" maps alike alone and
        # in "John Smith"): words of a name or an email are matched bare and after a space,
        # whatever their position; other pieces (an address's words too) are counted as they
        # stand, with the space the pre-tokenizer leaves in front of them (" 919" is not "919"
        # in tokens), and the first also after a space
        strip = pool in _WORD_POOLS
        at_start, first = first, first or strip
        counted = piece.lstrip(" ") if strip else piece
        target = self._count(counted, first)
        if pool is not None:
            word = self._pool_word(counted, pool, target, first)
            if word is not None:  # a stripped space goes back in front of it
                word = piece[: len(piece) - len(counted)] + word
                self._matched[(piece, pool, first)] = word
                return word
        orders: dict[str, list[str]] = {}  # letter run -> the pool words to try, in order
        runs = [(run, run.isdigit(), _LETTERS.fullmatch(run) is not None) for run in _RUNS.findall(piece)]
        # random candidates are counted without the cache (they never come again)
        count = self._count if pool is not None else self._count_once
        candidate = piece
        for attempt in range(TRIES):
            out = []
            for run, digits, letters in runs:
                if digits:
                    out.append("".join(rng.choices(_DIGITS, k=len(run))))
                elif letters:
                    if pool is not None and (len(run) <= 2 or run.lower() in self._kept):
                        out.append(run)  # initials, state codes, "Street", "Suite": no one's name
                    elif pool is not None:
                        order = orders.get(run)
                        if order is None:
                            order = self._pool_order(pool, run)
                            orders[run] = order
                        word = order[attempt]
                        if attempt >= TRIES // 2:  # longer in tokens: two words run together
                            word += order[(attempt * 7 + 3) % TRIES].lower()
                        out.append(_apply_case(word, _case_of(run)))
                    elif attempt >= TRIES // 2 and run.isascii() and len(run) in self._by_length:
                        # mnemonic runs (a bank code like WEST) are few tokens: a word of its length
                        out.append(_apply_case(rng.choice(self._by_length[len(run)]), _case_of(run)))
                    else:
                        out.append(_random_letters(run, rng))
                else:
                    out.append(run)
            candidate = "".join(out)
            if count(candidate.lstrip(" ") if strip else candidate, first) == target:
                self._matched[(piece, pool, first)] = candidate
                return candidate
        # no word or random draw matched: letters built from the tokenizer's own pieces
        lead = _LEAD.fullmatch(piece) or (_DIGIT_LEAD.fullmatch(piece) if pool is None else None)
        if lead is not None:
            # a word's build, like its pool order, depends on the word only (see above)
            crng = self._rng("compose " + pool, piece.lower()) if strip and pool is not None else rng
            built = self._compose(lead.group(1), lead.group(2), target, first, strip, crng, exact=pool is None)
            if built is None and strip:  # bare and after a space is too much to ask: as it stands
                built = self._compose(lead.group(1), lead.group(2), self._count(piece, at_start), at_start, False, crng)
            if built is not None:
                self._matched[(piece, pool, first)] = built
                return built
        self._missed = True
        return candidate

    def _pool_word(self, piece: str, pool: str, target: tuple[int, int], first: bool) -> str | None:
        """A word of ``pool`` in ``piece``'s case with ``target``'s token count, as it stands
        (bare or after the piece's one space) and after a space when ``first``; chosen by an HMAC
        of the lower-cased word among all such words. None when ``piece`` is not one word
        (optionally after a space) or no pool word has that count."""
        m = _LEAD.fullmatch(piece)
        if m is None or m.group(1) not in ("", " ") or (m.group(1) and first):
            return None
        lead, run = m.groups()
        if len(run) <= 2 or run.lower() in self._kept:
            return None
        both, bare, spaced = self._pool_index(pool, _case_of(run))
        words = both.get(target) if first else spaced.get(target[0]) if lead else bare.get(target[0])
        if not words:
            return None
        rng = self._rng(pool, run.lower())
        for _ in range(4):  # never the word itself
            word = rng.choice(words)
            if word.lower() != run.lower():
                return lead + word
        return None

    def _pool_index(self, pool: str, case: str) -> tuple[dict, dict, dict]:
        """``pool``'s words in ``case``, by (bare, after a space) token counts, by the bare count
        and by the count after a space."""
        got = self._indexes.get((pool, case))
        if got is None:
            words = [_apply_case(w, case) for w in self.pools[pool]]
            enc = self.tok.encode_batch
            bare = [len(e.ids) for e in enc(words, add_special_tokens=False)]
            spaced = [len(e.ids) for e in enc([" " + w for w in words], add_special_tokens=False)]
            got = ({}, {}, {})
            for w, b, sp in zip(words, bare, spaced):
                got[0].setdefault((b, sp), []).append(w)
                got[1].setdefault(b, []).append(w)
                got[2].setdefault(sp, []).append(w)
            self._indexes[(pool, case)] = got
        return got

    def _letter_tokens(self) -> dict[str, dict[int, list[str]]]:
        """The vocabulary's tokens made of ASCII letters only, by case ("lower", "upper",
        "title", "any") and length, and those made of ASCII digits ("digits")."""
        if self._letters is None:
            by: dict[str, dict[int, list[str]]] = {"lower": {}, "upper": {}, "title": {}, "any": {}, "digits": {}}
            for tok in sorted(self.tok.get_vocab()):
                if tok[:1] in _SPACE_MARKS and _ASCII_LETTERS.fullmatch(tok[1:]):
                    word = tok[1:]  # a word's first token after a space, without the space
                    case = _token_case(word)
                    if case is not None:
                        by.setdefault("spaced " + case, {}).setdefault(len(word), []).append(word)
                if _ASCII_DIGITS.fullmatch(tok):
                    by["digits"].setdefault(len(tok), []).append(tok)
                if not _ASCII_LETTERS.fullmatch(tok):
                    continue
                for c in (_token_case(tok), "any"):
                    if c is not None:
                        by[c].setdefault(len(tok), []).append(tok)
            self._letters = by
        return self._letters

    def _compose(
        self,
        lead: str,
        run: str,
        target: tuple[int, int],
        first: bool,
        strip: bool,
        rng: random.Random,
        tail: str = "",
        exact: bool = False,
    ) -> str | None:
        """``lead + run + tail`` with ``run`` (letters, or digits) replaced by tokens of the vocabulary run together,
        as many as the piece needs, of ``run``'s case and, where the tokens allow, its length; the
        number of tokens drawn follows what the last draw counted (BPE may merge two drawn tokens
        into one). With ``exact``, only draws of ``run``'s length count (a key's, a postcode's).
        None when no draw of :data:`COMPOSE_TRIES` has ``target``'s count."""
        vocab = self._letter_tokens()
        if run.isdigit():
            head = rest = "digits"
        elif run.islower():
            head = rest = "lower"
        elif run.isupper() and len(run) > 1:
            head = rest = "upper"
        elif run[0].isupper() and run[1:].islower():
            head, rest = "title", "lower"
        else:
            head = rest = "any"
        if not vocab[rest] or not (vocab[head] or vocab["upper"]):
            return None
        longest = max(vocab[rest])
        spaced = (vocab.get("spaced " + head) or {}) if first and not exact and not lead and target[1] > 0 else {}
        m = max(1, target[0] - (self.ntok(lead) if lead.strip() else 0) - (self.ntok(tail) if tail else 0))
        for attempt in range(COMPOSE_TRIES):
            if exact:  # as many letters as the run: 1 to `longest` a token
                m = min(max(m, -(-len(run) // longest)), len(run))
            parts = _split_length(len(run), m, longest, rng)
            words = []
            if spaced and attempt % 2:
                # a word that must keep its count after a space too: every other draw starts
                # with a token the vocabulary has after a space, as many tokens as that count
                first_words = spaced[rng.choice(list(spaced))]
                words.append(rng.choice(first_words))
                parts = _split_length(max(len(run) - len(words[0]), target[1] - 1), target[1] - 1, longest, rng)
                words.extend(rng.choice(vocab[rest].get(n) or vocab[rest][1]) for n in parts)
            for i, n in enumerate(parts if not words else ()):
                pools = vocab[head] if i == 0 else vocab[rest]
                if i == 0 and head == "title" and n == 1:
                    pools = vocab["upper"]
                have = pools.get(n) or pools[min(pools, key=lambda k: (abs(k - n), k))]
                words.append(rng.choice(have))
            candidate = lead + "".join(words) + tail
            if exact and len(candidate) != len(lead) + len(run) + len(tail):
                continue
            got = self._count_once(candidate.lstrip(" ") if strip else candidate, first)
            if got == target:
                return candidate
            m = max(1, m + target[0] - got[0])
        return None

    def _shape(self, value: str, pool: str | None, rng: random.Random, first: bool = True) -> str:
        """``value`` piece by piece: letters from ``pool`` (None: random letters), digits random;
        ``first``: ``value`` starts the whole value (its first piece may follow a space)."""
        return "".join(self._piece(p, pool, rng, first and i == 0) for i, p in enumerate(self._pieces(value)))

    # -- types -----------------------------------------------------------------------------------

    def surrogate(self, entity: str, value: str) -> str:
        """The surrogate of ``value``, an ``entity``; the same for the same (entity, value)."""
        return self.make(entity, value)[0]

    def make(self, entity: str, value: str) -> tuple[str, bool]:
        """The surrogate of ``value``, an ``entity``, and whether its token count differs from
        the value's (a token exception)."""
        cached = self._cache.get((entity, value))
        if cached is not None:
            self._cache.move_to_end((entity, value))
            return cached
        maker = _MAKERS.get(entity, Surrogates._generic)
        rng = self._rng(entity, value)
        want = self._count(value, True)
        out = value
        # pieces matched in one round are kept in the next (only the missed ones are tried again);
        # a round whose pieces all matched but whose whole did not starts the next afresh
        self._matched = {}
        self._cut = {}
        self._kept = KEPT_WORDS if entity in _PLACE_ENTITIES else frozenset()
        off = False
        for attempt in range(_WHOLE_TRIES):
            self._missed = False
            out = maker(self, value, rng)
            if self._missed and attempt < _WHOLE_TRIES - 1:
                continue  # a piece is off: try it again before counting the whole (long) value
            if self._count(out, True) == want:
                break
            if not self._missed:
                self._matched.clear()
        else:
            self.exceptions[entity] += 1
            off = True
        self._matched = {}
        self._cut = {}
        self._keep(entity, value, out, off)
        return out, off

    def _keep(self, entity: str, value: str, out: str, off: bool) -> None:
        """Cache a surrogate made (the least recently used past :data:`CACHE_VALUES` forgotten)."""
        self._cache[(entity, value)] = (out, off)
        if len(self._cache) > CACHE_VALUES:
            self._cache.popitem(last=False)

    def adopt(self, made: list[tuple[str, str, str, bool]]) -> None:
        """Take surrogates another :class:`Surrogates` with the same key and tokenizer made (a
        redaction worker's: ``(entity, value, surrogate, off)``) into the cache, as if
        :meth:`make` had made them here (a token exception is counted once, where it is new)."""
        for entity, value, out, off in made:
            if (entity, value) in self._cache:
                continue
            if off:
                self.exceptions[entity] += 1
            self._keep(entity, value, out, off)

    def _generic(self, value: str, rng: random.Random) -> str:
        return self._shape(value, None, rng)

    def _words(self, value: str, rng: random.Random) -> str:
        return self._shape(value, "name", rng)

    def _email(self, value: str, rng: random.Random) -> str:
        if any(c in value for c in " ([{<"):  # spelled out: "jane dot doe at example dot com"
            return self._spelled_email(value, rng)
        local, at, domain = value.rpartition("@")
        if domain.lower() in PUBLIC_MAIL_DOMAINS:  # shared by millions: names no one
            return self._shape(local, "word", rng) + at + domain
        head, dot, tld = value.rpartition(".")  # the top-level domain is kept
        return self._shape(head, "word", rng) + dot + tld

    def _spelled_email(self, value: str, rng: random.Random) -> str:
        """Each word but the top-level domain gets a word; "dot", "[at]" and the like are kept."""
        parts = SPELLED_SEPARATOR.split(value)
        seps = SPELLED_SEPARATOR.findall(value)
        out = [self._shape(p, "word", rng, i == 0) for i, p in enumerate(parts[:-1])] + parts[-1:]
        return "".join(p + (seps[i] if i < len(seps) else "") for i, p in enumerate(out))

    def _card(self, value: str, rng: random.Random) -> str:
        out = value[0] + self._shape(value[1:], None, rng)  # the first digit (the network) is kept
        places = [i for i, c in enumerate(out) if c.isdigit()]
        if not places:
            return out

        def weight(k: int, d: int) -> int:  # what digit d adds to the Luhn sum, k-th from the right
            return d if k % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2)

        digits = [int(out[i]) for i in places]
        total = sum(weight(k, d) for k, d in enumerate(reversed(digits)))
        # the Luhn sum is made a multiple of 10 by changing one digit: the last (the check
        # digit), or, when that changes the token count, the nearest before it that does not
        # (any digit can carry the check; the first, the network, stays)
        want, fixed = self._count(value, True), out
        for k, at in enumerate(reversed(places[1:])):
            d = int(out[at])
            new = next(x for x in range(10) if (weight(k, x) - weight(k, d) + total) % 10 == 0)
            candidate = out[:at] + str(new) + out[at + 1 :]
            if k == 0:
                fixed = candidate
            if self._count_once(candidate, True) == want:
                return candidate
        return fixed

    def _iban(self, value: str, rng: random.Random) -> str:
        compact = [c for c in value if c.isalnum()]
        if len(compact) < 5:
            return self._generic(value, rng)
        body = self._shape(value, None, rng)
        # keep the country code; recompute the two check digits (ISO 13616 mod 97)
        chars = [c for c in body if c.isalnum()]
        chars[0:2] = compact[0:2]
        chars[2:4] = ["0", "0"]
        rearranged = "".join(chars[4:] + chars[:4]).upper()
        number = int("".join(str(int(c, 36)) for c in rearranged))
        check = f"{98 - number % 97:02d}"
        chars[2:4] = list(check)
        it = iter(chars)
        return "".join(next(it) if c.isalnum() else c for c in body)

    def _ip(self, value: str, rng: random.Random) -> str:
        kept = _IP_SUFFIX.search(value)  # a "%zone" and a "/prefix" are kept (it matches, if empty)
        cut = kept.start() if kept else len(value)
        address, suffix = value[:cut], value[cut:]
        tail = _IPV4_TAIL.search(address)
        head, v4 = (address[: tail.start()], tail.group()) if tail else (address, "")
        lows = {1: (0, 9), 2: (10, 99), 3: (100, 255)}

        def octets() -> str:  # each within 0-255, with the original's number of digits
            return re.sub(r"\d+", lambda m: str(rng.randint(*lows.get(len(m.group()), (0, 255)))), v4)

        if not head:
            return octets() + suffix
        # IPv6: hex digit for hex digit (an IPv4 tail as above), tried until the token count
        # matches (see below), bare and after a space (as make() counts it); a full address's /32 routing
        # prefix (its first two groups: a provider's block, not a host) is kept
        want = self._count(value, True)
        kept = _IPV6_PREFIX.match(head)
        kept_text = kept.group() if kept and head.count(":") >= 4 else ""
        for attempt in range(TRIES):
            # after half the tries the zeros stay (a run of them, "0000", is one token; where an
            # address has zeros says nothing of whose it is) and the other hex digits get non-zero ones
            low, up = ("0123456789abcdef", "0123456789ABCDEF") if attempt < TRIES // 2 else ("123456789abcdef", "123456789ABCDEF")
            out = kept_text + "".join(
                c
                if c == "0" and attempt >= TRIES // 2
                else rng.choice(low)
                if c in "0123456789abcdef"
                else rng.choice(up)
                if c in "ABCDEF"
                else c
                for c in head[len(kept_text) :]
            )
            out += octets() + suffix
            if self._count_once(out, True) == want:
                break
        return out

    def _ssn(self, value: str, rng: random.Random) -> str:
        for _ in range(TRIES):
            out = self._shape(value, None, rng)
            digits = "".join(c for c in out if c.isdigit())
            if len(digits) != 9 or (
                digits[:3] not in ("000", "666") and digits[0] != "9" and digits[3:5] != "00" and digits[5:] != "0000"
            ):
                return out
        return out

    def _phone(self, value: str, rng: random.Random) -> str:
        if any(c.isalpha() for c in value):  # digit words: "five five five, one two three four"
            return _DIGIT_WORD.sub(lambda m: _word_case(rng.choice(_DIGIT_NAMES), m.group()), value)
        lead = _PHONE_HEAD.match(value)  # so that the surrogate has the value's layout (it matches, if empty)
        head = lead.group() if lead else ""
        return head + self._shape(value[len(head) :], None, rng)

    def _national_id(self, value: str, rng: random.Random) -> str:
        """Random digits and letters in the same places; the letters that make a type's shape
        are kept (a NINO's prefix and suffix, a PAN's fourth letter, an NIE's first) and a DNI's
        check letter is made valid."""
        out = list(self._shape(value, None, rng))
        if re.fullmatch(r"[A-Z]{2}[\d \u00a0]+[A-D]", value):  # UK NINO
            out[:2], out[-1] = list(value[:2]), value[-1]
        elif re.fullmatch(r"[A-Z]{5}\d{4}[A-Z]", value):  # IN PAN
            out[3] = value[3]
        elif re.fullmatch(r"(?:\d{8}|[XYZ]\d{7})-?[A-Z]", value):  # ES DNI / NIE
            out[0] = value[0] if value[0] in "XYZ" else out[0]
            head = "".join(out[:-1]).replace("-", "")
            head = str("XYZ".index(head[0])) + head[1:] if head[0] in "XYZ" else head
            out[-1] = "TRWAGMYFPDXBNJZSQVHLCKE"[int(head) % 23]
        return "".join(out)

    def _api_key(self, value: str, rng: random.Random) -> str:
        m = _KEY_PREFIX.match(value)
        head = m.group() if m else ""
        return head + self._shape(value[len(head) :], None, rng)

    def _jwt(self, value: str, rng: random.Random) -> str:
        header, _, rest = value.partition(".")  # the header (algorithm, type) is not secret
        parts = [
            p[:3] + self._shape(p[3:], None, rng) if p.startswith("eyJ") else self._shape(p, None, rng) for p in rest.split(".")
        ]
        return ".".join([header, *parts])

    def _pem(self, value: str, rng: random.Random) -> str:
        return "\n".join(line if _PEM_LINE.match(line.strip()) else self._shape(line, None, rng) for line in value.split("\n"))

    def _address(self, value: str, rng: random.Random) -> str:
        """Same shape: random postcode letters, pool words, street words kept, other kanji and kana
        (see the module docstring)."""
        out, at = [], 0
        for m in _ADDRESS_PARTS.finditer(value):
            if m.start() > at:
                out.append(self._shape(value[at : m.start()], "place", rng, at == 0))
            part, first = m.group(), m.start() == 0
            if m.lastgroup == "random":
                out.append(self._shape(part, None, rng, first))
            elif m.lastgroup == "cjk":
                out.append(self._cjk(part, rng, first))
            else:
                out.append(self._compound(part, len(m.group("ending")), rng, first))
            at = m.end()
        if at < len(value):
            out.append(self._shape(value[at:], "place", rng, at == 0))
        return "".join(out)

    def _compound(self, word: str, ending: int, rng: random.Random, first: bool) -> str:
        """A German compound (maybe after a space) whose last ``ending`` characters are a street
        word: a pool word in front of that word, the same token count as a whole (up to TRIES
        tries; after half of them, two pool words run together)."""
        done = self._matched.get((word, "compound", first))
        if done is not None:
            return done
        lead = word[: len(word) - len(word.lstrip(" \t"))]
        stem, tail = word[len(lead) : len(word) - ending], word[len(word) - ending :]
        target = self._count(word, first)
        order = self._pool_order("place", stem)
        candidate = word
        for attempt in range(TRIES):
            name = order[attempt]
            if attempt >= TRIES // 2:
                name += order[(attempt * 7 + 3) % TRIES].lower()
            candidate = lead + _apply_case(name, _case_of(stem)) + tail
            if self._count(candidate, first) == target:
                self._matched[(word, "compound", first)] = candidate
                return candidate
        built = (
            self._compose(lead, stem, target, first, False, self._rng("compose place", stem.lower()), tail)
            if stem.isalpha()
            else None
        )
        if built is not None:
            self._matched[(word, "compound", first)] = built
            return built
        self._missed = True
        return candidate

    def _cjk(self, run: str, rng: random.Random, first: bool) -> str:
        """``run`` (Japanese script, maybe after a space) with its characters other than JP_KEPT
        replaced by ones of the same script, the same token count as a whole, and after a space
        too when it is ``first`` (up to TRIES tries; the first half draws each character among
        those of its own token count)."""
        done = self._matched.get((run, "cjk", first))
        if done is not None:
            return done
        target = self._count(run, first)
        candidate = run
        for attempt in range(TRIES):
            chars = []
            for c in run:
                script = _script(c)
                if script is None or c in JP_KEPT:
                    chars.append(c)
                    continue
                pools = self._cjk_pool(script)
                same = pools.get(self.ntok(c)) if attempt < TRIES // 2 else None
                chars.append(rng.choice(same or pools[0]))
            candidate = "".join(chars)
            if self._count_once(candidate, first) == target:
                self._matched[(run, "cjk", first)] = candidate
                return candidate
        self._missed = True
        return candidate

    def _cjk_pool(self, script: str) -> dict[int, list[str]]:
        """The characters of ``script`` to draw from, by their token count (0: all of them)."""
        pools = self._cjk_pools.get(script)
        if pools is None:
            chars = sorted(set(_KANA.get(script, _KANJI)) - JP_KEPT)
            pools = {0: chars}
            for c in chars:
                pools.setdefault(self.ntok(c), []).append(c)
            self._cjk_pools[script] = pools
        return pools


def _script(c: str) -> str | None:
    """The script of a Japanese character: "kanji", "katakana", "hiragana" or None."""
    if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf":
        return "kanji"
    if "\u30a1" <= c <= "\u30fa":
        return "katakana"
    if "\u3041" <= c <= "\u3096":
        return "hiragana"
    return None


_DIGIT_NAMES = tuple(w for w in DIGIT_WORDS if w != "oh")
_DIGIT_WORD = re.compile(rf"(?i)\b(?:{'|'.join(DIGIT_WORDS)})\b|\d")


def _word_case(word: str, like: str) -> str:
    """A digit word (or a digit, for a digit) in the case of ``like``."""
    if like.isdigit():
        return str(DIGIT_WORDS.index(word) - 1 if word != "zero" else 0)
    return word.upper() if like.isupper() else word.capitalize() if like[0].isupper() else word


_MAKERS: dict[str, Callable[[Surrogates, str, random.Random], str]] = {
    "PERSON": Surrogates._words,
    "LOCATION": Surrogates._words,
    "EMAIL_ADDRESS": Surrogates._email,
    "CREDIT_CARD": Surrogates._card,
    "IBAN_CODE": Surrogates._iban,
    "IP_ADDRESS": Surrogates._ip,
    "US_SSN": Surrogates._ssn,
    "PHONE_NUMBER": Surrogates._phone,
    "API_KEY": Surrogates._api_key,
    "JWT": Surrogates._jwt,
    "PRIVATE_KEY": Surrogates._pem,
    "STREET_ADDRESS": Surrogates._address,
    **{e: Surrogates._national_id for e in NATIONAL_ID_ENTITIES},
}
