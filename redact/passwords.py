"""Passwords, tokens and keys that a word or a variable name introduces (entity ``PASSWORD``).

Owns :class:`PasswordRecognizer`, :data:`PASSWORD_SCORE` and :func:`secret_name`. The span is
the value only (inside its quotes when quoted), never the word or the name.

Where a value is introduced:

- **prose**: a secret word, in English, German, French, Spanish, Portuguese or Dutch ("password",
  "pw", "passcode", "PIN", "token", "api key", "client secret", "Passwort", "mot de passe",
  "contraseña", "senha", "wachtwoord"...), then the value after ``:`` / ``=`` ("pw: Tr0ub4dor&3"),
  after a copula, optionally past a short "for ..." clause or an adjective ("the password for the
  admin account is Xyz123", "my new password is ...", "minha senha nova é ..."), or after a space
  or "to" ("the passcode 4417", "set the password to ..."); also "VALUE is my password", the
  second half of a login pair ("the login is admin / VALUE", "credentials: bob:VALUE"); the word
  "code" alone only before a copula and a number of 3-8 digits, not after a status-code word
  ("the code for the garage is 7314", not "the status code is 404");
- **code and config**: ``NAME = value``, ``NAME: value``, ``"NAME": "value"``, ``export NAME=...``,
  ``--NAME value``, ``ENV NAME value``, ``<NAME>value</NAME>``, ``auth=("user", "value")``, where
  :func:`secret_name` says the
  name holds a secret (``DB_PASSWORD``, ``OPENAI_API_KEY``, ``client_secret``, ``X-Api-Key``,
  ``Authorization``: its ``Basic`` / ``Bearer`` scheme word is skipped).

What is not a value (:func:`_value_span`): placeholders (``<password>``, ``***``, ``xxx``,
``YOUR_API_KEY``, ``[REDACTED]``, ``...``), template and variable references (``{password}``,
``${DB_PASSWORD}``, ``$TOKEN``, ``%s``), and, unquoted, code that reads a secret (a call
``getpass()``, a subscript ``os.environ["X"]``, a dotted name ``self.token``, an identifier that
names a secret or is snake/camel case ``password``, ``db_password``, ``apiKey``, a type ``str``,
``Vec<u8>``, ``u32::MAX``, a type annotation ``token_delta: Counter = ...``, a literal ``None`` /
``true``, a string escape ``\\x00``). ``changeme``, ``password`` in quotes and other default passwords
are values: they open the system that uses them. Prose words are not values: English function
words and adjectives ("is required", "is too short", "expired") and their counterparts in the
other languages. How strong a value must look depends on how it is introduced
(:func:`_looks_secret`):

- after ``:`` / ``=``, and in code and config: 3+ characters for passwords, 6+ for keys and
  tokens; a value of letters only counts unless it is a stop word, or unquoted with an English
  suffix (``-ed``, ``-ing``, ``-ly``...) or a possessive (``vLLM's``); a value introduced by
  the word ``token`` alone needs a digit or 16+ characters (a field ``token`` also holds
  tokenizer output: ``"token": "Hello"``);
- after a copula ("is", "ist", "est", "es", "é"): the same for passwords; keys and tokens need
  8+ characters with letters and a digit or symbol ("the secret is out" is prose);
- after a space or "to": a password needs a digit, a symbol or a capital inside ("the passcode
  4417", "the password Gr33n!", not "the password field"); keys and tokens as after a copula
  ("token 50256" is a vocabulary id).
"""

from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

__all__ = ["PASSWORD_SCORE", "PasswordRecognizer", "secret_name"]

# below the specific key types (API_KEY 0.95, BEARER_TOKEN and URL_PASSWORD 0.9), which win a tie
PASSWORD_SCORE = 0.85

# families: "pw" (passwords, PINs, codes: 3+ characters), "key" (keys, secrets, credentials: 6+),
# "token" (the word token: 8+ characters after prose, never letters only)
_PW_WORDS = (
    r"pass(?:word|wd|phrase|code)s?|pass[ -](?:word|phrase|code)|pwd|pw|p/w|pword|"
    r"one[- ]time (?:password|code|pin)|otp|(?:2fa|mfa|verification|security|login|access) code|"
    r"(?-i:PIN|Pin)(?:[ -]?(?:code|number|nummer))?|pin[ -]?(?:code|number)|pincode|(?-i:CVV2?|CVC2?)|"
    r"passwort|kennwort|zugangscode|geheimzahl|"
    r"mot de passe|mdp|code secret|code d'accès|code d’accès|phrase secrète|phrase de passe|"
    r"contraseña|contrasena|clave(?: de acceso)?|código de acceso|código de seguridad|"
    r"senha|palavra[- ]passe|código de acesso|"
    r"wachtwoord|toegangscode"
)
_KEY_WORDS = (
    r"secret(?:[ _-]key)?|client[ _-]?secret|api[ _-]?key|apikey|access[ _-]?key|private[ _-]?key|"
    r"(?:signing|encryption|master|license|licence|app) key|credentials?|creds|"
    r"clé (?:d'|d’|de l'|de l’)?api|clé secrète|clé privée|chave (?:de )?api|chave secreta|"
    r"clave (?:de )?api|clave secreta|api[- ]schlüssel|geheimer schlüssel|api[- ]sleutel|geheime sleutel"
)
_TOKEN_WORDS = r"(?:access|auth|refresh|api|session|bot|bearer|personal access) tokens?|tokens?|jeton|jetón"
# "code" alone: only a number after a copula or ":" (door, alarm, safe codes), and not after a word
# that makes it a status or lookup code (:data:`_NOT_SECRET_CODES`)
_CODE_WORDS_RX = r"code|código|codigo"
_KEYWORD = rf"(?i:(?P<pw>{_PW_WORDS})|(?P<key>{_KEY_WORDS})|(?P<token>{_TOKEN_WORDS})|(?P<code>{_CODE_WORDS_RX}))"

_COPULA = (
    r"(?i:is|was|are|will be|should be|=|ist|lautet|war|est|était|c'est|c’est|es|era|será|é|fica|"
    r"wordt|werd)(?:[ \t]+(?i:now|still|just|actually|currently|jetzt|maintenant|ahora|agora|nu|"
    r"set to|changed to))?"
)
_MID = (
    r"[ \t]+(?i:for|to|of|on|at|in|für|zum|zur|vom|von|des|der|du|de|pour|del|para|do|da|dos|das|"
    r"van|voor|op)\b[^\n.!?:=;,]{1,40}?"
)
_STRONG = r"[ \t]*[\"'\]]?[ \t]*(?:=>|->|:=|={1,3}|:)[ \t]*"
_VALUE = (
    r"(?:(?P<scheme>(?:Basic|Bearer|Token|Digest|Bot)[ \t]+)?(?:[bruf]?\"(?P<dq>[^\"\n]{1,200})\"|"
    r"[bruf]?'(?P<sq>[^'\n]{1,200})'|`(?P<bq>[^`\n]{1,200})`|“(?P<cq>[^”\n]{1,200})”|"
    r"«[ \u00a0]?(?P<gq>[^»\n]{1,200}?)[ \u00a0]?»|"
    # a (user, password) pair: auth=("svc", "...")
    r"\([ \t]*[\"'][^\"'\n]{0,100}[\"'][ \t]*,[ \t]*[\"'](?P<tq>[^\"'\n]{1,200})[\"'][ \t]*\)|"
    r"(?P<bare>[^\s\"'`]\S{0,199})))"
)
# an adjective between the word and its copula ("my new password is", "minha senha nova é")
_ADJ = (
    r"[ \t]+(?i:new|current|old|temporary|nova|novo|nueva|nuevo|actual|atual|nouveau|nouvelle|"
    r"neue|neues|neuer|nieuwe|nieuw|temporária|temporal|temporaire)\b"
)
_PROSE = (
    rf"(?<![\w$.-]){_KEYWORD}(?![\w-])"
    rf"(?:(?:{_ADJ}|(?P<mid>{_MID}))?"
    rf"(?:(?P<strong>{_STRONG})|[ \t]+(?P<copula>{_COPULA})(?:[ \t]*:[ \t]*|[ \t]+))"
    rf"|(?P<weak>[ \t]+(?i:(?:set |changed |reset |updated )?to[ \t]+)?))" + _VALUE
)
_AFTER = (
    r"(?<!\S)(?P<bare>[^\s\"'`]\S{0,99}?)[,;]?[ \t]+(?i:is|was)[ \t]+(?i:my|the|our|your|his|her|their)[ \t]+"
    r"(?i:new[ \t]+|current[ \t]+|old[ \t]+|temporary[ \t]+)?(?i:password|passcode|pin|pw|passphrase)\b"
)
# "the login is admin / VALUE", "credentials: bob:VALUE", "user/pass: admin / VALUE"
_PAIR = (
    r"(?<![\w-])(?i:logins?|credentials?|creds|user(?:name)?[ \t]*/[ \t]*pass(?:word)?|username and password)"
    r"(?:[ \t]+(?i:is|are)[ \t]+|[ \t]*[:=][ \t]*)[^\s/:]{1,64}[ \t]*[/:][ \t]*(?P<strong>)" + _VALUE
)
_IDENT = r"(?P<name>\$?[A-Za-z_][\w.$-]{0,80}?)"
_ASSIGN = rf"(?<![\w.$]){_IDENT}(?<![.-])[\"']?\]?(?P<strong>[ \t]*(?:=>|->|:=|=(?!=)|:(?!:))[ \t]*)" + _VALUE
_FLAG = rf"(?<![\w-])--?{_IDENT}(?<![.-])(?P<weak>[ \t]+)(?!-)" + _VALUE
_DOCKER_ENV = rf"(?m)^[ \t]*ENV[ \t]+{_IDENT}(?P<weak>[ \t]+)(?![=\s])" + _VALUE
_XML = r"<(?P<name>[\w:.-]{1,60})>(?P<strong>)(?P<bare>[^<\s][^<\n]{0,199})</(?P=name)>"

# "VALUE is my password" is tried only where the words are
_AFTER_NEEDLE = re.compile(
    r"(?i)(?:is|was)[ \t]+(?:my|the|our|your|his|her|their)[ \t]+(?:\w+[ \t]+)?"
    r"(?:password|passcode|pin|pw|passphrase)\b"
)
_PATTERNS = {
    "prose": _PROSE,
    "pair": _PAIR,
    "after": _AFTER,
    "assign": _ASSIGN,
    "flag": _FLAG,
    "docker_env": _DOCKER_ENV,
    "xml": _XML,
}

# --- names ---------------------------------------------------------------------------------------
_NAME_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_PW_PARTS = frozenset(
    {
        "password",
        "passwd",
        "passwort",
        "pwd",
        "pw",
        "passphrase",
        "passcode",
        "pin",
        "pincode",
        "otp",
        "kennwort",
        "wachtwoord",
        "senha",
        "contrasena",
        "mdp",
        "motdepasse",
    }
)
_KEY_PARTS = frozenset(
    {
        "secret",
        "apikey",
        "credential",
        "credentials",
        "creds",
        "cred",
        "authorization",
        "auth",
        "privatekey",
        "accesskey",
        "secretkey",
        "clientsecret",
        "passkey",
    }
)
_KEY_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("signing", "key"),
        ("encryption", "key"),
        ("master", "key"),
        ("license", "key"),
        ("app", "key"),
        ("client", "key"),
        ("consumer", "key"),
        ("session", "key"),
        ("sas", "key"),
    }
)
# a name ending in KEY holds a secret unless the word before says which kind of key it is
_KEY_NOT_SECRET = frozenset(
    {
        "primary",
        "foreign",
        "sort",
        "partition",
        "cache",
        "hash",
        "range",
        "public",
        "pub",
        "idempotency",
        "lookup",
        "object",
        "row",
        "unique",
        "composite",
        "dedup",
        "routing",
        "shard",
        "group",
        "map",
        "dict",
        "sequence",
        "message",
        "translation",
        "i18n",
        "cursor",
        "next",
        "prev",
        "index",
        "natural",
        "surrogate",
        "sorting",
        "s3",
        "bucket",
        "file",
        "dedupe",
        "react",
        "list",
        "hot",
        "shortcut",
        "keyboard",
        "music",
    }
)
# a part that makes the name describe a secret rather than hold one (MAX_TOKENS, PASSWORD_MIN_LENGTH)
_META_PARTS = frozenset(
    {
        "ttl",
        "expiry",
        "expires",
        "expiration",
        "exp",
        "expire",
        "timeout",
        "length",
        "len",
        "min",
        "max",
        "url",
        "uri",
        "endpoint",
        "host",
        "port",
        "file",
        "path",
        "dir",
        "name",
        "id",
        "ids",
        "enabled",
        "enable",
        "disabled",
        "disable",
        "required",
        "require",
        "type",
        "header",
        "algorithm",
        "alg",
        "lifetime",
        "age",
        "count",
        "limit",
        "size",
        "policy",
        "rotation",
        "version",
        "prefix",
        "suffix",
        "hash",
        "hashed",
        "sha",
        "sha1",
        "sha256",
        "sha512",
        "digest",
        "md5",
        "checksum",
        "fingerprint",
        "provider",
        "mode",
        "scope",
        "scopes",
        "issuer",
        "audience",
        "field",
        "param",
        "format",
        "label",
        "hint",
        "strategy",
        "method",
        "backend",
        "store",
        "location",
        "region",
        "arn",
        "env",
        "var",
        "variable",
        "pattern",
        "regex",
        "chars",
        "usage",
        "used",
        "interval",
        "rate",
        "retries",
        "num",
        "total",
        "prompt",
        "completion",
        "input",
        "output",
        "cached",
        "reasoning",
        "ref",
        "refs",
        "memory",
        "mgr",
        "manager",
        "class",
        "handler",
        "service",
        "encoding",
        "schema",
        "validator",
        "strength",
        "complexity",
        "placeholder",
        "text",
        "help",
        "error",
        "message",
        "msg",
        "changed",
        "updated",
        "created",
        "at",
        "date",
        "time",
        "timestamp",
        "window",
        "budget",
        "per",
        "ratio",
        "logprob",
        "logprobs",
        "index",
        "idx",
        "offset",
        "position",
        "pos",
        "kind",
        "level",
        "flag",
        "flags",
        "source",
        "sources",
        "show",
        "visible",
        "hidden",
        "toggle",
        "check",
        "checker",
        "reset",
        "forgot",
        "rules",
        # flags and tokenizer / timing fields: has_token, eos_token, first_token_ns
        "has",
        "is",
        "should",
        "needs",
        "use",
        "uses",
        "with",
        "without",
        "no",
        "skip",
        "allow",
        "eos",
        "bos",
        "pad",
        "unk",
        "sep",
        "cls",
        "mask",
        "special",
        "added",
        "vocab",
        "first",
        "last",
        "next",
        "prev",
        "stop",
        "start",
        "end",
        "ns",
        "ms",
        "us",
        "sec",
        "seconds",
        "latency",
        "throughput",
        "exceptions",
        "exception",
        "delta",
        "counts",
        "stats",
        "tokens",
    }
)


def secret_name(name: str) -> str | None:
    """The family (``"pw"``, ``"key"`` or ``"token"``) of a variable, field or header ``name``
    that holds a secret, or None: the parts of its last dotted segment (split on ``_ - $`` and
    camel case) hold a secret word (or end in one: ``PGPASSWORD``) and no part only describes one
    (``MAX_TOKENS``, ``TOKEN_URL``, ``PASSWORD_MIN_LENGTH``)."""
    parts = [p.lower() for p in _NAME_PARTS.findall(name.rsplit(".", 1)[-1])]  # config.db.password
    if not parts or _META_PARTS.intersection(parts):
        return None
    if (
        _PW_PARTS.intersection(parts)
        or ("pass" in parts and len(parts) >= 2)
        or any(p.endswith(("password", "passwd")) for p in parts)
    ):  # PGPASSWORD
        return "pw"
    if (
        _KEY_PARTS.intersection(parts)
        or any(pair in _KEY_PAIRS for pair in zip(parts, parts[1:]))
        or any(p.endswith(("secret", "apikey")) for p in parts)
    ):
        return "key"
    if len(parts) >= 2 and parts[-1] == "key" and parts[-2] not in _KEY_NOT_SECRET:
        return "key"
    if "token" in parts:
        return "token" if parts == ["token"] else "key"
    return None


# --- values --------------------------------------------------------------------------------------
_NOT_SECRET_CODES = frozenset(
    {
        "status",
        "error",
        "exit",
        "return",
        "response",
        "http",
        "zip",
        "postal",
        "post",
        "area",
        "country",
        "dial",
        "dialing",
        "source",
        "iso",
        "currency",
        "language",
        "lang",
        "product",
        "sku",
        "tracking",
        "order",
        "reference",
        "ref",
        "item",
        "article",
        "tax",
        "vat",
        "hs",
        "sic",
        "naics",
        "icd",
        "cpt",
        "airport",
        "iata",
        "icao",
        "swift",
        "bic",
        "bank",
        "sort",
        "branch",
        "routing",
        "color",
        "colour",
        "hex",
        "ascii",
        "unicode",
        "char",
        "character",
        "key",
        "event",
        "reason",
        "result",
        "fault",
        "exception",
        "op",
        "opcode",
        "machine",
        "byte",
        "promo",
        "discount",
        "coupon",
        "voucher",
        "referral",
        "invite",
        "qr",
        "bar",
        "morse",
        "dress",
    }
)
_DIGITS_3_8 = re.compile(r"^\d{3,8}$")
_PLACEHOLDER = re.compile(
    r"^(?:[*xX.•●·#?_\-–—…]+|<[^<>]*>?|\[[^\[\]]*\]?|\{[^{}]*\}?|\{\{.*\}\}|\$\{.*\}|\$\(.*\)?|"
    r"\$[A-Za-z_]\w*|"
    r"%\(?\w*\)?[sd]|%[A-Za-z_]\w*%|\$\$?\w*|(?i:your|my|the|enter|insert|paste|put|add)[_ -].*|.*(?i:_here|-here)|"
    r"(?i:redacted|hidden|removed|omitted|masked|censored|elided|none|null|nil|undefined|true|false|yes|no|on|off|"
    r"n/a|na|tbd|todo|fixme|unknown|example|sample|placeholder|dummy|empty|blank|secret|token|"
    r"\.\.\.|…))$"
)
_CALL_OR_SUBSCRIPT = re.compile(r"^[!*&]*[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*[(\[]")
# a dotted name (self.token, process.env.TOKEN; msg.choices.0 with a lower-case head, not Sapporo.Snow.3321)
_DOTTED = re.compile(r"^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$|^[a-z_$][\w$]*(?:\.(?:[A-Za-z_$][\w$]*|\d+)){2,}$")
_CODE_SHAPE = re.compile(r"::|^[A-Za-z_]\w*<|\\[xnrtu0]")  # Rust / C++ paths, generics, string escapes
_POSSESSIVE = re.compile(r"^[^\W\d_]+['’]s$")
_ANNOTATION_END = re.compile(r"[ \t]*(?:=(?!=)|\|[ \t]*\w)")  # "name: Type = ...", "name: Type | None"
_SNAKE = re.compile(r"^(?:[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)+|_+[a-z]\w*|[A-Z][A-Z0-9]*(?:_[A-Z][A-Z0-9]*)+)$")
_CAMEL = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]+)+$")
_SECRETISH = re.compile(r"(?i)pass|pwd|secret|token|key|cred|auth|\bpw")
_CODE_WORDS = frozenset(
    {
        "str",
        "string",
        "int",
        "bytes",
        "bool",
        "boolean",
        "number",
        "any",
        "object",
        "secretstr",
        "secretbytes",
        "optional",
        "text",
        "varchar",
        "char",
        "self",
        "this",
        "cls",
        "value",
        "val",
        "v",
        "x",
        "s",
        "p",
        "tok",
        "arg",
        "args",
        "kwargs",
        "data",
        "getpass",
        "input",
        "prompt",
        "required",
        "os",
        "env",
        "environ",
    }
)
_STOP = frozenset(
    """
    a an the this that these those it its is are was were be been being am to too very so not no yes of in on at
    by for with from as into onto about than then also just only still now here there set reset changed change
    same different missing wrong correct incorrect invalid valid expired expiring empty blank required optional
    mandatory weak strong short long secure insecure safe unsafe simple easy hard complex good bad fine ok okay
    bearer basic digest
    new old current default temporary stored saved sent hashed encrypted encoded shown hidden visible unknown
    case sensitive protected needed necessary incorrectly correctly what which who how why where when and or but
    if my your our their his her mine yours please enter type use see click provide choose select create copy
    paste generate rotate revoke check verify confirm update keep store save send share never always
    something anything nothing everything someone one ones field box below above following attached
    nicht falsch richtig zu sehr noch jetzt leer abgelaufen ungültig gültig geändert kurz lang sicher unsicher
    korrekt erforderlich der die das ein eine mein dein ihr unser und oder
    pas trop invalide expiré correct vide requis obligatoire le la les un une mon ton très faux changé sécurisé
    et ou
    muy incorrecta incorrecto inválida inválido válida válido correcta vacía requerida obligatoria el los las una
    mi tu demasiado segura débil caducado caducada y
    não muito incorreta inválida correta vazia obrigatória o os um uma minha meu fraca forte expirado expirada e
    niet te ongeldig geldig onjuist fout leeg verplicht de het een mijn jouw verlopen sterk zwak veilig en of
""".split()
)
_ENGLISH_SUFFIX = re.compile(r"(?:ed|ing|ly|able|ible|ive|ous|ful|less|ment|ness|tion|sion)$")
_VERSION_OR_DATE = re.compile(r"^v?\d+(?:\.\d+)+[a-z0-9.-]*$|^\d{4}-\d{2}-\d{2}")
_SCHEME = re.compile(r"^(?:Basic|Bearer|Token|Digest|Bot)[ \t]+(?=\S)")
_PARAM_CUT = re.compile(r"&[A-Za-z_][\w.-]*=|;[ \t]*[A-Za-z_][\w .-]*=")
_LEAD = "([{\"'*`"
_TRAIL = ".,;:?)]}>\"'*`"
_MIN_LEN = {"pw": 3, "key": 6, "token": 6}
_MIN_LEN_PROSE = {"pw": 3, "key": 8, "token": 8}


def _value_span(text: str, m: re.Match, family: str, strength: str, literal: bool = False) -> tuple[int, int] | None:
    """The value's span in ``text``, or None when it is no value (module docstring). ``strength``:
    ``"strong"`` after ``:`` / ``=`` and in code and config, ``"copula"`` after "is", ``"weak"``
    after a space or "to". ``literal``: a config line (``NAME=value``, ``name: value`` ending the
    line), where an unquoted identifier is the value itself, not a variable."""
    groups = m.groupdict()
    quoted = next((g for g in ("dq", "sq", "bq", "cq", "gq", "tq") if groups.get(g) is not None), None)
    start, end = m.span(quoted or "bare")
    value = text[start:end]
    if _PLACEHOLDER.match(value.strip()):
        return None
    if quoted is None:
        cut = _PARAM_CUT.search(value)
        if cut:
            end = start + cut.start()
        while end > start and text[end - 1] in _TRAIL:
            end -= 1
        while start < end and text[start] in _LEAD:
            start += 1
        value = text[start:end]
        if (
            not value
            or _PLACEHOLDER.match(value)
            or _POSSESSIVE.match(value)
            or _code_reference(value, literal, prose=strength != "strong")
        ):
            return None
        if (groups.get("strong") or "").strip() == ":" and _ANNOTATION_END.match(text, end):
            return None  # a type annotation: "token_delta: Counter = field(...)"
        if "://" in value or value.startswith(("/", "~/", "./", "../", "!")):
            return None  # a URL (its password is URL_PASSWORD's), a path, a YAML tag
    else:
        value = _SCHEME.sub("", value.strip(), count=1)  # "Bearer {token}" in quotes
        if not value or _PLACEHOLDER.match(value):
            return None
        start = text.index(value, start)
        end = start + len(value)
    if not _looks_secret(value, family, strength, quoted is not None):
        return None
    return start, end


def _code_reference(value: str, literal: bool = False, prose: bool = False) -> bool:
    """An unquoted value that is code reading a secret: a call, a subscript, a Rust path or generic
    type; unless in ``prose`` (after "is", a space, "to": "Mi clave es perro.Azul.7"), a dotted
    name, a type or a stand-in (``str``, ``value``); unless ``literal`` too, an identifier that
    names a secret or is snake / camel case."""
    if _CALL_OR_SUBSCRIPT.match(value) or _CODE_SHAPE.search(value) or value.startswith("*"):
        return True
    if prose:
        return False
    if _DOTTED.match(value):
        return True
    if value.lower() in _CODE_WORDS:  # types and stand-ins, config lines included (password: str)
        return True
    if literal:
        return False
    if re.fullmatch(r"[A-Za-z_]\w*", value):
        return bool(_SNAKE.match(value) or _CAMEL.match(value) or _SECRETISH.search(value))
    return False


def _looks_secret(value: str, family: str, strength: str, quoted: bool) -> bool:
    prose = strength != "strong"
    if len(value) < (_MIN_LEN_PROSE if prose else _MIN_LEN)[family]:
        return False
    words = value.split()
    letters_only = all(w.isalpha() for w in words)
    if letters_only:
        if all(w.lower() in _STOP for w in words):
            return False
        if family == "token" or strength == "weak":
            return _inner_capital(value) and family != "token"
        if family == "key" and prose:
            return False
        if not quoted and len(words) == 1 and _ENGLISH_SUFFIX.search(value.lower()):
            return False
        return True
    if len(words) > 1 and not quoted:
        return False
    if family == "token" and not any(c.isdigit() for c in value) and len(value) < 16:
        return False  # "tokens: [...]", "the token <|eos|>"; real tokens are long or hold digits
    if prose:
        if _VERSION_OR_DATE.match(value):
            return False
        has_digit = any(c.isdigit() for c in value)
        has_symbol = any(not c.isalnum() for c in value.rstrip("!"))
        if family != "pw":
            return any(c.isalpha() for c in value) and (has_digit or has_symbol)
        return has_digit or has_symbol or _inner_capital(value)
    return True


def _inner_capital(value: str) -> bool:
    """Mixed case beyond a capital first letter ("hUnterTwo"), as passwords are and words are not."""
    rest = value[1:]
    return any(c.isupper() for c in rest) and any(c.islower() for c in value)


_UPPER_NAME = re.compile(r"\$?[A-Z][A-Z0-9_]*")
_YAML_KEY_START = re.compile(r"(?:^|\n)[ \t]*(?:-[ \t]+)?$")  # only indentation (or "- ") before the name
_LINE_END = re.compile(r"[ \t]*(?:#.*)?(?:\r?\n|$)")


def _config_line(text: str, m: re.Match) -> bool:
    """``NAME=value`` with an upper-case name and no spaces (.env, shell), or a YAML line (``name:
    value`` alone on its line) whose value is not the name itself (``password: password``)."""
    if m.group("bare") is None:
        return False
    connector = m.group("strong")
    if connector == "=":
        return _UPPER_NAME.fullmatch(m.group("name")) is not None
    if (
        connector.strip() == ":"
        and _LINE_END.match(text, m.end())
        and _YAML_KEY_START.search(text, max(0, m.start() - 200), m.start())
    ):
        return m.group("bare").lower() != m.group("name").lower()
    return False


def _secret_code(text: str, m: re.Match, strength: str, span: tuple[int, int]) -> bool:
    """ "code" introduces a secret only as "code ... is NUMBER" after no status-code word (``"code":
    401`` and ``code="200"`` are status codes)."""
    if strength != "copula" or not _DIGITS_3_8.match(text[span[0] : span[1]]):
        return False
    before = text[max(0, m.start() - 30) : m.start()].split()
    return not before or before[-1].lower().strip("-") not in _NOT_SECRET_CODES


class PasswordRecognizer(EntityRecognizer):
    """Values introduced by a secret word or a secret-holding name (the module docstring)."""

    def __init__(self) -> None:
        self._patterns = [(name, re.compile(rx)) for name, rx in _PATTERNS.items()]
        super().__init__(supported_entities=["PASSWORD"], name="password_recognizer", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):  # noqa: D102 (presidio's signature)
        out: list[RecognizerResult] = []
        seen: set[tuple[int, int]] = set()
        for kind, rx in self._patterns:
            if kind == "after" and _AFTER_NEEDLE.search(text) is None:
                continue
            at = 0
            while (m := rx.search(text, at)) is not None:
                # a rejected match may hide another: a secret name after a plain one ($env:API_KEY = ...),
                # a secret word inside it ("code PIN est 9921"): go on after its first word only
                at = m.end("name") if "name" in rx.groupindex else m.start() + 1
                if kind == "prose":
                    family = "pw" if m.group("pw") or m.group("code") else "key" if m.group("key") else "token"
                    strength = (
                        "strong" if m.group("strong") is not None else "copula" if m.group("copula") is not None else "weak"
                    )
                elif kind == "after":
                    family, strength = "pw", "weak"
                elif kind == "pair":
                    family, strength = "pw", "strong"
                else:
                    family = secret_name(m.group("name"))
                    if family is None:
                        continue
                    strength = "weak" if kind == "flag" and family == "token" else "strong"
                span = _value_span(text, m, family, strength, kind == "assign" and _config_line(text, m))
                if span is not None and kind == "prose" and m.group("code") and not _secret_code(text, m, strength, span):
                    span = None
                if span is not None:
                    at = max(at, m.end())
                if span is not None and span not in seen:
                    seen.add(span)
                    out.append(RecognizerResult("PASSWORD", span[0], span[1], PASSWORD_SCORE))
        return out
