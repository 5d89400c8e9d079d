"""People named in a fixed shape that spaCy's small English model often misses (entity ``PERSON``).

Owns :class:`NameRecognizer`, :data:`NAME_PATTERN`, :data:`NOT_A_NAME` and :func:`name_span`.

A name (:data:`NAME_PATTERN`) is one to four words, each starting with a capital letter (Latin
with diacritics, Greek, Cyrillic) or written in a caseless script (CJK, Hangul, Arabic, Hebrew,
Devanagari, Thai); words may hold apostrophes and hyphens ("O'Brien", "Jean-Luc", "al-Rashid",
"d'Almeida"), initials ("J."), and particles between or before them ("van der Berg", "de la
Cruz", "bin Salman", "Ó Briain"). A trailing possessive "'s" is not part of it. Lower-case names
("hey anna") are not found: without the capital, any word would be one.

The shapes (:data:`_PERSON_CONTEXTS`; the span is the name, never the context word or the title):

- greetings in English and the other languages the analyzer reads ("Hi X,", "Hello again X!",
  "Hallo X", "Bonjour X", "Hola X y Z,"), with an optional title ("Dear Dr. X Y") and lists;
- sign-offs: the name after a comma ("Thanks, X", "Best, X"), after thanks or regards at the end
  of a line ("Thanks X!"), or alone on the next line ("Regards,\\nX"); ``--`` / ``—`` signatures (on the
  same line or, as in e-mail, the next);
- ``cc: X``, "Also cc X"; "message / email / call ... from X", "heard from X", "from Dr. X";
  "X wrote:" (and "X <x@host> wrote:", "schrieb", "a écrit", "escribió", "escreveu", "schreef");
- titles: Mr, Mrs, Ms, Mx, Dr, Prof, Miss, Madame, Mme, Herr, Frau, Sr., Sra., Dhr., Mevr., Sir,
  Aunt, Uncle (and Tante, Oncle, Tía, Tío...) + name;
- "X's" followed by a word that only people have (number, email, wife, manager, flight...);
- "my name is X" and its translations; "named X", "called X";
- roles: "customer X", "my colleague X", "account holder: X" / "is X", "Attendees: X, Y",
  ``"holder": "X"`` and other name fields, ``Name <user@host>``, ``('Name', 'user@host')``,
  ``From:`` / ``To:`` headers, vCard ``FN:``;
- contact shapes: a name line followed by a phone or email line, a full name line followed by an
  address line (a house number, or Unit / Apt), a list or table row that starts with a full name
  and goes on, past a separator or a "(City)", to a phone number ("1. X Y (City) +44 ...",
  "| X Y | 0532 ..."), "X, phone ..." at a
  line's start or after a colon, and "call X on / at ...".

Each candidate goes through :func:`name_span`: its leading words that name no one are dropped
("On Monday Anna" -> "Anna"), and nothing is found when none is left. A word names no one when it
is in :data:`NOT_A_NAME` (English function words, days and months, common nouns of prompts,
greeting targets such as "Team" or "World", imperative verbs that start prompts, software,
sample-company and assistant names), is all capitals (unless a title stands before it), or has a
capital inside that does not follow a name prefix (Mc, Mac, De, Le, O'...): "UserManager" is
code, "McDonald" a name. The analyzer cuts spaCy's PERSON spans with the same function
("Summarize", "Postman", "Product Designer" are dropped; "Dear Anna" becomes "Anna").
"""

from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

__all__ = ["NAME_PATTERN", "NOT_A_NAME", "NameRecognizer", "name_span"]

# above the NER's 0.85: Presidio drops a result that a same-type result of equal or higher score
# contains, and a NER span holding ours ("Dear Anna", "Ximena y Joaquín") may be cut or dropped later
_SCORE = 0.9


def _class_of(pred, *ranges: tuple[int, int]) -> str:
    """A regex character class of the code points in ``ranges`` that satisfy ``pred``."""
    chars = [chr(c) for lo, hi in ranges for c in range(lo, hi + 1) if pred(chr(c))]
    out, i = [], 0
    while i < len(chars):
        j = i
        while j + 1 < len(chars) and ord(chars[j + 1]) == ord(chars[j]) + 1:
            j += 1
        out.append(re.escape(chars[i]) if i == j else f"{re.escape(chars[i])}-{re.escape(chars[j])}")
        i = j + 1
    return "[" + "".join(out) + "]"


# capitals of the Latin (with Latin-1, Extended-A/B and Additional), Greek and Cyrillic blocks
_UP = _class_of(str.isupper, (0x41, 0x5A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x52F), (0x1E00, 0x1EFF))
_LETTER = r"[^\W\d_]"
_CASELESS = "[\u0590-\u05ff\u0600-\u06ff\u0900-\u097f\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{1,8}"
_PARTICLE = (
    r"(?:van|von|der|den|de|del|della|degli|di|da|do|dos|das|du|des|la|le|ter|ten|zu|bin|binti|bint|ibn|ben|"
    r"al|el|af|av|Ó|Ní|Nic|Uí)"
)
# a word: capitalized (with an optional "al-", "d'", "O'" head), an initial, or a caseless run;
# "'s" after it is not part of it
_WORD = (
    rf"(?:(?:(?:[Aa]l|[Ee]l|[Aa]bu|[Ii]bn|[Bb]in|[Dd]|[Ll]|O)['’-])?{_UP}{_LETTER}+(?:['’-](?!s\b){_LETTER}+)*"
    rf"|{_UP}\.|{_CASELESS})"
)
_GAP = r"[ \t\u00a0]+"
NAME_PATTERN = (
    rf"(?:{_PARTICLE}{_GAP}){{0,2}}{_WORD}(?:{_GAP}(?:{_PARTICLE}{_GAP}){{0,2}}{_WORD}){{0,3}}"
    rf"(?![\w-])(?!['’](?!s\b)\w)"
)
"""One name (no group); see the module docstring."""
_NAME = rf"(?P<s>{NAME_PATTERN})"
# two words or more: where the context alone is weaker (a name line above an address line)
_FULL_NAME = (
    rf"(?P<s>(?:{_PARTICLE}{_GAP}){{0,2}}{_WORD}(?:{_GAP}(?:{_PARTICLE}{_GAP}){{0,2}}{_WORD}){{1,3}}"
    rf"(?![\w-])(?!['’](?!s\b)\w))"
)
_PHONE_SHAPE = r"\+?\(?\d[\d ().-]{6,}\d"
# names joined by commas and "and" in its languages: "Hi Ana, Bo and Chen,"
_NAMES = (
    rf"(?P<s>{NAME_PATTERN}(?:[ \t]*(?:,|&|\band\b|\bund\b|\bet\b|\by\b|\be\b|\ben\b)[ \t]*"
    rf"{NAME_PATTERN})*)"
)
_TITLE = (
    r"(?:Mr|Mrs|Ms|Mx|Dr|Prof|Professor|Miss|Mister|Madam|Madame|Mme|Mlle|Herr|Frau|Sr\.|Sra\.|Srta\.|"
    r"Dña\.|Dhr\.|Mevr\.|Sig\.|Sig\.ra|Rev|Sir|Dame|Aunt|Auntie|Uncle|Tante|Onkel|Oncle|Tía|Tío|Tia|Tio|"
    r"Oom)\.?"
)
_TITLED = rf"(?:{_TITLE}{_GAP})?"

_GREETING = (
    r"(?:(?i:hi|hello|hey|hiya|heya|howdy|dear|dearest|greetings|good (?:morning|afternoon|evening|day)|"
    r"hallo|hoi|moin|bonjour|bonsoir|salut|coucou|hola|buenas|buenos días|olá|ola|ciao|salve|"
    r"hej|hei|merhaba|namaste|shalom)"
    r"|Liebe|Lieber|Sehr geehrte|Sehr geehrter|Cher|Chère|Chers|Querido|Querida|Estimado|Estimada|"
    r"Prezado|Prezada|Caro|Cara|Beste|Geachte|Oi|Yo|Morning)"
)
_SIGN_OFF = (
    r"(?i:thanks(?: again| so much| a lot)?|thank you(?: so much)?|many thanks|thx|ty|best|all the best|"
    r"best wishes|(?:best|kind|warm|warmest|many)? ?regards|cheers|sincerely|yours(?: truly| sincerely)?|"
    r"love|take care|talk soon|respectfully|cordially|with thanks|"
    r"mit freundlichen grüßen|viele grüße|beste grüße|liebe grüße|grüße|gruß|lg|vg|mfg|"
    r"cordialement|bien cordialement|bien à vous|amicalement|merci|bisous|"
    r"saludos|un saludo|atentamente|gracias|abrazos|atenciosamente|abraços|obrigad[oa]|cumprimentos|"
    r"met vriendelijke groet|groeten|groetjes|bedankt|cordiali saluti|grazie)"
)
_THANKS = (
    r"(?i:thanks(?: again| so much| a lot)?|thank you(?: so much)?|many thanks|thx|cheers|"
    r"(?:best|kind|warm)? ?regards|merci|danke|gracias|obrigad[oa]|bedankt|grazie)"
)
_WROTE = r"(?:wrote|writes|said|says|schrieb|a écrit|escribió|escreveu|schreef|scrisse|ha scritto)"
_FROM_NOUNS = (
    r"(?i:e-?mails?|mails?|messages?|msgs?|notes?|texts?|calls?|letters?|replies|reply|responses?|"
    r"feedback|updates?|invites?|invitations?|requests?|DMs?|pings?|voicemails?|memos?|comments?|"
    r"reviews?|quotes?|offers?|complaints?|tickets?|news|word|heard|hear|got|received|forwarded)"
)
_PERSON_NOUNS = (
    r"(?:number|phone|mobile|cell|email|e-mail|address|birthday|birth date|wife|husband|partner|"
    r"boyfriend|girlfriend|fianc[ée]e?|mother|mom|mum|father|dad|son|daughter|brother|sister|kids?|"
    r"children|child|baby|family|parents|boss|manager|assistant|colleague|friend|desk|office|"
    r"car|house|home|flat|apartment|flight|passport|visa|salary|SSN|resume|résumé|CV|contract|"
    r"appointment|calendar|schedule|diagnosis|prescription|account|signature|laptop|password|"
    r"login|handwriting|surname|maiden name|nickname|age|wedding|funeral|leave|vacation|"
    r"sick leave|medical|health|insurance|bank|card|payslip|paycheck|timesheet|performance)"
)
_ROLE = (
    r"(?i:customer|client|patient|tenant|applicant|candidate|employee|colleague|co-?worker|contractor|"
    r"intern|student|guest|caller|passenger|landlord|neighbou?r|new hire|"
    r"(?:my|our|your|his|her|their) (?:friend|boss|manager|wife|husband|partner|son|daughter|mother|mom|"
    r"mum|father|dad|brother|sister|cousin|uncle|aunt|grandma|grandmother|grandpa|grandfather|colleague|"
    r"coworker|doctor|lawyer|teacher|neighbou?r|roommate|landlord|accountant|client|assistant|"
    r"friend and colleague))"
)
_NAME_IS = (
    r"(?:(?i:my name is|my name's|name's|i am called|call me|je m'appelle|je m’appelle|mon nom est|"
    r"ich heiße|ich heisse|mein name ist|me llamo|mi nombre es|meu nome é|eu sou o|eu sou a|"
    r"ik heet|mijn naam is|mi chiamo|named|called))"
)
_HOLDER = (
    r"(?i:account holder|card ?holder|holder|beneficiary|payee|recipient|attn|c/o|"
    r"signed by|approved by|reviewed by|assigned to|reported by|requested by|contact person|"
    r"emergency contact|next of kin|guardian|authori[sz]ed by|prepared by|on behalf of|"
    r"attendees|participants|invitees|present|speakers|panelists|organi[sz]er|reviewers?|assignees?)"
)
_NAME_KEYS = (
    r"(?:full_?name|fullName|first_?name|firstName|last_?name|lastName|given_?name|family_?name|"
    r"display_?name|displayName|customer_?name|contact_?name|holder(?:_?name)?|account_?holder|"
    r"card_?holder|cardholder(?:_?name)?|beneficiary(?:_?name)?|recipient(?:_?name)?|payee|"
    r"assignee|reporter|requester|signer|employee(?:_?name)?|patient(?:_?name)?|author|owner|name)"
)
_END = r"(?=[ \t]*(?:[^\w\s]|\n|$)|[ \t]+[a-z])"  # punctuation, emoji, line end, or a lowercase word

# where prompts name people in a fixed shape that spaCy's small model often misses
_PERSON_CONTEXTS: dict[str, str] = {
    "greeting": rf"(?<![\w-]){_GREETING}(?:[ \t]+(?i:again|there))?[ \t]*,?[ \t]+{_TITLED}{_NAMES}{_END}",
    "sign_off_line": rf"(?<![\w-]){_SIGN_OFF}[ \t]*[,!.]?[ \t]*\n(?:[ \t]*\n)?[ \t]*{_TITLED}{_NAME}[ \t]*[,.]?"
    rf"(?=[ \t]*(?:\n|$))",
    # "Best, X" / "Thanks, X" with a comma; without one only after thanks and regards ("Thanks Anna!")
    "sign_off_comma": rf"(?<![\w-]){_SIGN_OFF}[ \t]*,[ \t]*{_TITLED}{_NAME}(?=[ \t]*(?:[,.!]|\n|$))",
    "thanks_name": rf"(?<![\w-]){_THANKS}[ \t]+{_TITLED}{_NAME}(?=[ \t]*[!.]?[ \t]*(?:\n|$))",
    "signature": r"(?m)^[ \t]*(?:--|—|–)[ \t]*(?:\n[ \t]*)?" + _NAME + r"[ \t]*$",  # "-- \n" of e-mail
    "cc": rf"(?:(?m:^)|(?<![\w-])(?i:also|please|pls|and)[ \t]+)(?i:b?cc)(?:'?(?:ing|d|ed))?"
    rf"(?:[ \t]*:[ \t]*|[ \t]+)@?{_NAMES}",
    "cc_colon": rf"(?<![\w-])(?i:b?cc):[ \t]*{_NAMES}",
    "from": rf"(?<![\w-]){_FROM_NOUNS}[ \t]+(?:back[ \t]+)?from[ \t]+{_TITLED}{_NAME}",
    "from_title": rf"(?<![\w-])from[ \t]+{_TITLE}{_GAP}{_NAME}",
    "wrote": rf"{_NAME}(?:[ \t]*[<(\[][^>)\]\n]{{1,80}}[>)\]])?[ \t]+{_WROTE}[ \t]*:",
    "title": rf"(?<![\w.]){_TITLE}{_GAP}{_NAME}",
    "possessive": rf"(?<![\w.'’-]){_NAME}['’]s[ \t]+(?:(?:new|old|current|own|personal|work|home|private|mobile|"
    rf"cell|direct|first|last|latest)[ \t]+)?{_PERSON_NOUNS}\b",
    "name_is": rf"(?<![\w-]){_NAME_IS}[ \t]+{_TITLED}{_NAME}",
    "role": rf"(?<![\w-]){_ROLE}[ \t]*,?[ \t]+{_TITLED}{_NAME}",
    "holder": rf"(?<![\w-]){_HOLDER}(?:[ \t]*:[ \t]*|[ \t]+(?i:is|was|are|were)[ \t]+|[ \t]+){_TITLED}{_NAMES}",
    # a list or table row: a name, then (an optional "(City)" and) a phone number on the same line
    "name_then_phone": rf"(?m)(?:^|(?<=\|))[ \t]*(?:\d{{1,3}}[.)][ \t]+|[-*•][ \t]+)?{_FULL_NAME}[ \t]*"
    rf"(?:\([^()\n]{{1,40}}\)[ \t]*(?:[-–—,:|][ \t]*)?|[-–—,:|][ \t]*){_PHONE_SHAPE}",
    "call_on": rf"(?<![\w-])(?i:call|phone|ring|text|whatsapp|contact|ping|reach)[ \t]+{_TITLED}{_NAME}"
    rf"[ \t]+(?i:on|at)\b",
    "display_name": rf"{_NAME}[ \t]*[<(][\w.+-]+@",  # Name <user@host>, Name (user@host)
    "quoted_display_name": rf"[\"']{_NAME}[\"'][ \t]*,[ \t]*[\"'][\w.+-]+@",  # ('Name', 'user@host')
    "contact_block": rf"(?m)^[ \t]*{_NAME}[ \t]*\n[ \t]*(?:\+?\(?\d[\d ().-]{{6,}}|[\w.+-]+@[\w-]+\.)",
    # a full name alone on its line above an address line (a house number and a word, or a unit)
    "address_block": rf"(?m)^[ \t]*(?:\d{{1,3}}[.)][ \t]+)?{_FULL_NAME}[ \t]*,?[ \t]*\n[ \t]*"
    rf"(?:\d{{1,5}}[a-zA-Z]?,?[ \t]+[^\W\d_]|(?i:unit|apt|flat|suite)\b)",
    # "Jane Roe, phone ..." at a line's start or after ":", ";", "(" (not "Lead at Acme Corp, phone")
    "contact_words": rf"(?m)(?:^|(?<=[:;(]))[ \t]*{_NAME}[ \t]*,[ \t]*(?i:phone|tel|mobile|cell|email|e-mail)\b",
    "from_header": rf"(?m)^(?:From|To|Cc|Bcc|Reply-To|Sender):[ \t]*{_NAMES}",
    "vcard": rf"(?m)^FN:[ \t]*{_NAME}",
    "name_field": rf"[\"']?{_NAME_KEYS}[\"']?[ \t]*[:=][ \t]*[\"']{_NAME}[\"']",
}
# patterns that start with the name: a cheap search for what must follow it, to skip the text
_NEEDLES: dict[str, re.Pattern[str]] = {
    "wrote": re.compile(rf"[ \t]{_WROTE}[ \t]*:"),
    "possessive": re.compile(r"['’]s[ \t]"),
    "display_name": re.compile(r"[<(][\w.+-]+@"),
    "quoted_display_name": re.compile(r"[\"'][ \t]*,[ \t]*[\"'][\w.+-]+@"),
    "contact_words": re.compile(r"(?i),[ \t]*(?:phone|tel|mobile|cell|e-?mail)\b"),
    "name_then_phone": re.compile(r"\d[\d ().-]{6,}\d"),
}
_TITLE_AHEAD = re.compile(rf"{_TITLE}{_GAP}$")

# words that are not names when they stand where a name would: lower case
NOT_A_NAME: frozenset[str] = frozenset(
    """
    a about above across after again against all almost alone along already also although always am among an and
    another any anyone anything are around as at back be because been before behind being below beside besides
    between beyond both but by can cannot could did do does doing done down during each either else enough even
    ever every everyone everybody everything few for from further had has have he her here hers herself him
    himself his how however i if in into is it its itself just last least less many me might mine more most
    much must my myself neither never next no nobody none nor not nothing now of off often on once one only
    onto or other others our ours ourselves out over own per perhaps please quite rather really same several
    she should since so some someone something sometimes still such than that the their them themselves then
    there these they this those though through thus to together too toward towards under unless until up upon
    us very via was we well were what whatever when where whether which while who whom whose why with within
    without would yet you your yours yourself yourselves ok okay yes yeah hey hi hello thanks thank thx regards
    best cheers dear sincerely yours love again there
    monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday tonight weekend
    january february march july september october november december feb mar apr jul aug sep sept oct nov dec
    all team teams everyone everybody folks guys gang world there sir sirs madam madame ma'am customer customers
    colleagues friends friend support admin admins user users member members reader readers partner partners
    hiring manager managers recruiter committee board staff department hr it finance sales legal marketing
    engineering ops devops security billing accounts accounting payroll helpdesk desk service services
    success care relations portal guide handbook secret secrets key keys id ids name names number account
    profile settings record records data info information details experience journey satisfaction agreement
    feedback loan loans ticket tickets request order orders invoice invoices payment payments office
    contact contacts address email phone mobile message messages note notes subject re fw fwd attachment
    report reports update updates summary overview introduction conclusion background question questions
    answer answers issue issues problem problems error errors bug bugs fix test tests example examples sample
    template draft version release project product products designer developer engineer lead director
    officer head chief president ceo cto cfo coo vp analyst consultant specialist coordinator assistant
    associate intern student teacher doctor nurse patient client clients
    summarize summarise convert translate write rewrite explain fix refactor generate create list describe
    compare draft format parse extract classify review check add remove delete update make give show tell
    find plan help decode encode optimize optimise debug implement calculate suggest recommend analyze analyse
    sort fill build design outline proofread paraphrase shorten expand simplify answer respond reply sign use
    keep note let lets consider imagine assume act pretend return print run install deploy set get send call
    open close start stop read load save copy paste provide include ensure avoid try tell ask make please
    bearer basic token digest bot auth oauth
    python java javascript typescript go golang rust kotlin scala php perl haskell erlang elixir
    clojure lua dart matlab fortran cobol bash shell powershell sql nosql json yaml toml xml html css
    csv markdown latex regex django flask fastapi react vue angular svelte nextjs nuxt express node nodejs
    deno bun numpy pandas scipy pytorch torch tensorflow keras jupyter pydantic sqlalchemy alembic pytest
    celery airflow spark hadoop redis postgres postgresql mysql sqlite mongodb mongo cassandra
    elasticsearch kibana grafana prometheus docker kubernetes helm terraform ansible nginx apache
    linux ubuntu debian fedora centos windows macos android ios chrome firefox safari edge git github gitlab
    bitbucket jira confluence slack zoom teams outlook excel word powerpoint figma notion trello asana stripe
    twilio heroku vercel netlify supabase firebase aws azure gcp google microsoft apple amazon meta facebook
    twitter openai anthropic postman swagger webpack vite babel eslint prettier tailwind bootstrap
    contoso fabrikam northwind acme initech globex umbrella example
    chatgpt gpt gemini copilot llama mistral siri cortana bard assistant ai bot chatbot
    english french german spanish portuguese dutch italian chinese japanese korean arabic hindi russian
    mr mrs ms mx dr prof miss mister mom dad mum mommy daddy grandma grandpa granny
    zendesk salesforce hubspot intercom freshdesk servicenow pagerduty datadog sentry splunk okta auth0
    prefer ask platform cloud required optional diary salary salaries wage wages bonus expenses refund refunds
    actually also apparently unfortunately luckily basically honestly anyway sure hmm wait btw fyi maybe
    sadly hopefully currently recently finally meanwhile oh ah yep nope
""".split()
)


def _word_ok(word: str, titled: bool, listed: bool = True) -> bool:
    """Not in :data:`NOT_A_NAME` (when ``listed``), not all capitals (unless ``titled``), and no
    capital inside it except after a name prefix ("McDonald", "DeShawn"; not "UserManager")."""
    bare = word.rstrip(".")
    if not bare[:1].isalpha():  # "-U", "#2"
        return False
    if listed and bare.lower().replace("’", "'") in NOT_A_NAME:
        return False
    letters = [c for c in bare if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return titled
    return all(not bare[i].isupper() or not bare[i - 1].isalpha() or _prefix_ok(bare[:i]) for i in range(1, len(bare)))


_NAME_PREFIXES = ("mc", "mac", "de", "di", "da", "le", "la", "van", "von", "fitz", "du", "del", "della", "st")


def _prefix_ok(head: str) -> bool:
    low = head.lower()
    tail = re.split(r"['’-]", low)[-1]
    return tail in _NAME_PREFIXES


_ONE_NAME = re.compile(NAME_PATTERN)


class NameRecognizer(EntityRecognizer):
    """PERSON where a fixed shape names someone (:data:`_PERSON_CONTEXTS`); each name of a list
    ("Hi Ana and Bo,") is its own span, cut by :func:`name_span`."""

    def __init__(self) -> None:
        self._patterns = [(re.compile(rx), _NEEDLES.get(name)) for name, rx in _PERSON_CONTEXTS.items()]
        super().__init__(supported_entities=["PERSON"], name="person_context_recognizer", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):  # noqa: D102 (presidio's signature)
        out: list[RecognizerResult] = []
        seen: set[tuple[int, int]] = set()
        for rx, needle in self._patterns:
            if needle is not None and needle.search(text) is None:
                continue
            for m in rx.finditer(text):
                start, end = m.span("s")
                for n in _ONE_NAME.finditer(text, start, end):
                    span = name_span(text, n.start(), n.end())
                    if span is None or span in seen:
                        continue
                    seen.add(span)
                    out.append(RecognizerResult("PERSON", span[0], span[1], _SCORE))
        return out


_WORDS = re.compile(r"\S+")


def name_span(text: str, start: int, end: int, check_tail: bool = True) -> tuple[int, int] | None:
    """The name in ``text[start:end]``: its leading particles (unless a title stands before them:
    "Mr van der Hoeven") and words that name no one (:func:`_word_ok`) dropped ("On Monday Anna" ->
    "Anna"); None when nothing is left, or when ``check_tail`` and a later word is all capitals
    (with no title before the name) or code-like. Only the first word is looked up in
    :data:`NOT_A_NAME`: later ones may be short names that are English words ("Nguyễn Văn An")."""
    words = [(w.start(), w.end()) for w in _WORDS.finditer(text, start, end)]
    keep_particles = _titled(text, start)  # "Mr van der Hoeven"
    while words:
        a, b = words[0]
        if text[a:b].islower() and keep_particles:
            break
        if not text[a:b].islower() and _word_ok(text[a:b], _titled(text, a)):
            break
        words = words[1:]
    if not words:
        return None
    first = words[0][0]
    titled = _titled(text, first)
    if check_tail and not all(text[a:b].islower() or _word_ok(text[a:b], titled, listed=False) for a, b in words[1:]):
        return None
    return first, words[-1][1]


def _titled(text: str, at: int) -> bool:
    return _TITLE_AHEAD.search(text, max(0, at - 16), at) is not None
