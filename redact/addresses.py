"""Street addresses: the ``STREET_ADDRESS`` recognizer, its per-country shapes and street words.

Owns :data:`ADDRESS_ENTITY`, :data:`STREET_WORDS`, :data:`DE_COMPOUND_ENDINGS`, :data:`JP_KEPT`,
:func:`find_addresses` and :class:`AddressRecognizer`.

An address is found by its shape, never by a lookup of names: a *street line* in one of the
shapes below, then an optional *tail* of up to four parts (city, region code, postcode, country),
each after a comma, a line break or a space. A whole address is one span ("221B Baker Street,
London NW1 6XE"); a street line alone is one too ("Flat 2, 10 Downing St").

Street lines (letters are Latin with accents; words are capitalized unless said otherwise; a
street line never spans a line break):

- ``en``: house number, one to four words, a street suffix (USPS and UK / Canadian / Australian
  ones, :data:`_EN_SUFFIXES`; capitalized or all capitals, a few lower-case too: "street", "rd"),
  an optional direction and units after it ("Apt 4B", "Suite 200", "#12", "3rd Floor"). A unit
  may come first ("Unit 5, 12 Smith St", "Flat 2, 10 Downing St", "Level 3 1 Johnson Arcade").
  House numbers: "221B", "12-14", "5/12" (Australian unit/number), "4-123" (Canadian); not in
  "1.5", "3,5", "10:30". Storage words are no street ("3 Google Drive folders"). ``en_route``:
  "1234 State Route 7", "12 Highway 61".
- ``fr``: house number (with "bis" / "ter"), a French street type in either case ("rue",
  "boulevard", "boul.", "chemin", "montée"...), particles ("de la", "du", "d'") and names;
  Quebec's too. Types that are English words too ("place", "route", "passage", "square", "port")
  need a particle after them ("3 place de la Concorde"), or a postcode tail (``fr_weak``).
  ``fr_no_number``: a type and a name with a postcode tail ("rue Pereira, 82533 Nice").
- ``de``: a word ending in a German street word ("Hauptstraße", "Klappweg", "Kurfürstendamm",
  "Karl-Marx-Allee", "Alma-Wende-Ring"), or one or two words and a street word ("Berliner
  Straße"), then the house number ("12", "3a", "5-7", "Nr. 5"). ``de_preposition``: a
  preposition and one or two words ("Am Markt 3a", "Unter den Linden 5"), the number not a year
  (19xx, 20xx: "Im Jahr 2024" is no address). ``de_weak``: a word ending in "-ring", "-markt",
  "-berg", "-hof"... (:data:`_DE_WEAK_ENDINGS`; English has "String 5", "Spring 2024") only with a
  postcode tail.
- ``es``: a Spanish, Catalan, Italian or Portuguese street type first ("Calle", "C/", "Avda.",
  "Paseo", "Piazza", "Rua"...), names with particles, the number ("5", "nº 5", "s/n"), then floor
  and door ("3º B", "2º izq.", "bajo", "Puerta 7", "Apt. 02"). ``es_no_number``: a type and a
  name with a postcode tail. Italian "Via" is no type here ("Via Python 3"): ``loose`` finds it
  with a postcode tail.
- ``jp``: romaji chome-ban-go ("1-2-3 Nishi-Shinjuku", "1 Chome-1-2 Oshiage") followed by a ward,
  city or town ("Shinjuku-ku", "Sumida City") or a postcode tail; ``jp_name_first``: the name
  first ("Nishi-Shinjuku 2-8-1, Shinjuku-ku").
- ``jp_script``: Japanese script: an optional "〒123-4567", a prefecture (…都道府県), one or two
  municipalities (…市区町村郡), a district and chome-ban-go ("2-8-1", "17丁目4番16号", "1"), then an
  optional building and room. With the numbers, hiragana may stand in the municipality and
  district ("日の出町", "松が谷"); without them it needs the 〒 postcode or a prefecture, and
  takes no hiragana (which would run into the prose after it).
- ``po_box``: "PO Box 123", "P.O. Box", "GPO Box", "Locked Bag", "Postfach 12 34 56", "B.P.",
  "C.P.", "Apartado de Correos", "Caixa Postal"; ``po_box_short``: "BP 12" / "CP 12" only with a
  postcode tail; ``us_military``: "PSC 7602, Box 0776, APO AA 95814", "USNV Sanchez, FPO AA
  29057".
- ``postcode`` alone: a Canadian province and postcode ("QC H3A 1A1"), a UK postcode with its
  space ("NW1 6XE"), an Australian state and postcode ("NSW 2010"), "〒160-0023".
- ``loose`` (only with a postcode tail): a unit or a house number and one to four words, or two
  to four words and a number, or words ending in a street suffix: Indian, Italian, Brazilian and
  Mexican shapes and UK lines without a number ("Church Lane, Little Snoring NR21 0AA").

Tails: a postcode with a city after it ("10115 Berlin", "75008 Paris Cedex 08", "D-10115",
"01310-100 São Paulo - SP"), or a city with an optional region code and a postcode after it
("London NW1 6XE", "Springfield, IL 62704", "Surry Hills NSW 2010", "Montréal (Québec) H3A 1A1",
"Tokyo 160-0023", "Pune 411001"), or a region code and a postcode ("ON M5V 2T6"), or a UK,
Canadian or Japanese postcode alone. Those are *strong* parts, allowed after a line break or a
space too. A city or region code alone is a *weak* part: only after a comma, and only where a
punctuation mark, a line break or the end of the text follows it. A 4-digit postcode before a
city is never a year (19xx, 20xx).

Where matches of several shapes overlap, the longest wins (then the earliest), except that a
``loose`` or ``postcode`` match that starts before another shape's match inside it, with no
digit before that match, is dropped (it ran into the words before a street line: "Contact Hans
Müller Hauptstraße 12, 10115 Berlin"). Every match has score :data:`SCORE`. Each shape's regex
is compiled once, behind a check of the characters its match can start with (:data:`_STARTS`):
all shapes together take 0.25 ms a text on the labelled corpus (seed 3: 1,328 texts, 344 kB;
spaCy's NER takes ~20 ms).

:data:`STREET_WORDS` (lower case) are the street suffixes and types, unit and PO box words,
directions, particles, German street words, romaji ward words and Australian state codes the
shapes use: the surrogates keep them as they are (:mod:`redact.surrogates`), as they keep the
street word at the end of a German compound (:data:`DE_COMPOUND_ENDINGS`) and the
Japanese-script characters of :data:`JP_KEPT` (prefecture, municipality and numbering suffixes).
"""

from __future__ import annotations

import re

from presidio_analyzer import EntityRecognizer, RecognizerResult

__all__ = ["ADDRESS_ENTITY", "STREET_WORDS", "JP_KEPT", "DE_COMPOUND_ENDINGS", "SCORE", "AddressRecognizer", "find_addresses"]

ADDRESS_ENTITY = "STREET_ADDRESS"
SCORE = 0.7


def _alt(words: tuple[str, ...] | list[str]) -> str:
    """A regex alternation of ``words``, longest first (so "Street" is tried before "St")."""
    return "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True))


def _cased(words: tuple[str, ...]) -> list[str]:
    """Each word as written (capitalized) and in capitals."""
    return [v for w in words for v in (w, w.upper())]


# -- word lists ----------------------------------------------------------------------------------

# USPS Publication 28 suffixes (with plurals), UK, Canadian and Australian ones and abbreviations
_EN_SUFFIXES = (
    "Alley",
    "Aly",
    "Approach",
    "Arcade",
    "Avenue",
    "Ave",
    "Av",
    "Bend",
    "Boulevard",
    "Blvd",
    "Bvd",
    "Branch",
    "Bridge",
    "Broadway",
    "Brook",
    "Brooks",
    "Burg",
    "Burgs",
    "Bypass",
    "Byway",
    "Camp",
    "Canyon",
    "Cape",
    "Causeway",
    "Center",
    "Centers",
    "Centre",
    "Chase",
    "Circle",
    "Circles",
    "Cir",
    "Circuit",
    "Cct",
    "Circus",
    "Cliff",
    "Cliffs",
    "Close",
    "Cl",
    "Club",
    "Common",
    "Commons",
    "Concourse",
    "Corner",
    "Corners",
    "Course",
    "Court",
    "Courts",
    "Ct",
    "Crt",
    "Cove",
    "Coves",
    "Creek",
    "Crescent",
    "Cres",
    "Crest",
    "Croft",
    "Crossing",
    "Crossroad",
    "Curve",
    "Dale",
    "Dam",
    "Divide",
    "Drive",
    "Drives",
    "Dr",
    "Drv",
    "Drove",
    "Embankment",
    "End",
    "Esplanade",
    "Esp",
    "Estate",
    "Estates",
    "Expressway",
    "Expy",
    "Extension",
    "Extensions",
    "Fairway",
    "Fall",
    "Falls",
    "Ferry",
    "Field",
    "Fields",
    "Flat",
    "Flats",
    "Ford",
    "Fords",
    "Forest",
    "Forge",
    "Forges",
    "Fork",
    "Forks",
    "Fort",
    "Freeway",
    "Fwy",
    "Garden",
    "Gardens",
    "Gdns",
    "Gate",
    "Gateway",
    "Glade",
    "Glen",
    "Glens",
    "Green",
    "Greens",
    "Grn",
    "Grove",
    "Groves",
    "Gr",
    "Harbor",
    "Harbors",
    "Harbour",
    "Haven",
    "Heights",
    "Hts",
    "Highway",
    "Hwy",
    "Hill",
    "Hills",
    "Hollow",
    "Inlet",
    "Island",
    "Islands",
    "Isle",
    "Junction",
    "Junctions",
    "Key",
    "Keys",
    "Knoll",
    "Knolls",
    "Lake",
    "Lakes",
    "Land",
    "Landing",
    "Lane",
    "Laneway",
    "Ln",
    "Light",
    "Lights",
    "Loaf",
    "Lock",
    "Locks",
    "Lodge",
    "Loop",
    "Mall",
    "Manor",
    "Manors",
    "Meadow",
    "Meadows",
    "Mews",
    "Mill",
    "Mills",
    "Mission",
    "Motorway",
    "Mount",
    "Mountain",
    "Mountains",
    "Neck",
    "Orchard",
    "Oval",
    "Overpass",
    "Parade",
    "Pde",
    "Park",
    "Parks",
    "Parkway",
    "Parkways",
    "Pkwy",
    "Pass",
    "Passage",
    "Path",
    "Pike",
    "Pine",
    "Pines",
    "Place",
    "Pl",
    "Plain",
    "Plains",
    "Plaza",
    "Plz",
    "Point",
    "Points",
    "Port",
    "Ports",
    "Prairie",
    "Promenade",
    "Quay",
    "Radial",
    "Ramp",
    "Ranch",
    "Rapid",
    "Rapids",
    "Rest",
    "Ridge",
    "Ridges",
    "Rise",
    "River",
    "Road",
    "Roads",
    "Rd",
    "Route",
    "Rte",
    "Row",
    "Rue",
    "Run",
    "Shoal",
    "Shoals",
    "Shore",
    "Shores",
    "Skyway",
    "Spring",
    "Springs",
    "Spur",
    "Spurs",
    "Square",
    "Squares",
    "Sq",
    "Station",
    "Stravenue",
    "Stream",
    "Street",
    "Streets",
    "St",
    "Str",
    "Summit",
    "Terrace",
    "Tce",
    "Ter",
    "Throughway",
    "Trace",
    "Track",
    "Trafficway",
    "Trail",
    "Trl",
    "Tunnel",
    "Turnpike",
    "Tpke",
    "Underpass",
    "Union",
    "Unions",
    "Valley",
    "Valleys",
    "Viaduct",
    "View",
    "Views",
    "Village",
    "Villages",
    "Ville",
    "Vista",
    "Walk",
    "Walks",
    "Wall",
    "Way",
    "Ways",
    "Well",
    "Wells",
    "Wharf",
    "Wynd",
    "Yard",
)
# lower-case suffixes that prose uses ("12 Main street")
_EN_SUFFIXES_LOWER = ("street", "st", "road", "rd", "avenue", "ave", "lane", "ln", "boulevard", "blvd")
_DIRECTIONS = (
    "N",
    "S",
    "E",
    "W",
    "NE",
    "NW",
    "SE",
    "SW",
    "North",
    "South",
    "East",
    "West",
    "Nord",
    "Sud",
    "Est",
    "Ouest",
    "Norte",
    "Sur",
    "Oeste",
)
# a unit before or after the street line ("Flat 2, ...", "... Apt 4B")
_UNIT_WORDS = (
    "Apartment",
    "Apt",
    "Suite",
    "Ste",
    "Unit",
    "Flat",
    "Studio",
    "Room",
    "Rm",
    "Floor",
    "Fl",
    "Level",
    "Lvl",
    "Shop",
    "Office",
    "Building",
    "Bldg",
    "Block",
    "Blk",
    "Tower",
    "Lot",
    "Space",
    "Trlr",
    "Dept",
    "Villa",
    "Plot",
    "PMB",
    "House",
    "Door",
    "Appartement",
    "App",
    "Bureau",
    "Local",
    "Porte",
    "Bâtiment",
    "Bât",
    "Escalier",
    "Étage",
    "Piso",
    "Puerta",
    "Pta",
    "Planta",
    "Portal",
    "Bloque",
    "Esc",
    "Escalera",
    "Apto",
    "Depto",
    "Dpto",
    "Edif",
    "Edificio",
    "Interior",
    "Int",
    "Piano",
    "Scala",
    "Interno",
    "Andar",
    "Bloco",
    "Casa",
    "Sala",
    "Appartamento",
    "Wohnung",
    "Whg",
    "Zimmer",
)
# French street types; those that are English words too need a particle or a postcode tail
_FR_TYPES = (
    "rue",
    "avenue",
    "av",
    "boulevard",
    "boul",
    "bd",
    "bld",
    "chemin",
    "ch",
    "allée",
    "allee",
    "allé",
    "impasse",
    "imp",
    "quai",
    "faubourg",
    "fbg",
    "rond-point",
    "cité",
    "sentier",
    "ruelle",
    "montée",
    "côte",
    "rang",
    "parvis",
    "esplanade",
    "promenade",
    "traverse",
    "lieu-dit",
    "hameau",
    "résidence",
    "cours",
    "voie",
    "carrefour",
    "villa",
    "sente",
    "venelle",
)
_FR_TYPES_WEAK = ("place", "route", "passage", "square", "port")
_FR_PARTICLES = (
    "de la",
    "de l'",
    "de l’",
    "du",
    "des",
    "de",
    "d'",
    "d’",
    "l'",
    "l’",
    "la",
    "le",
    "les",
    "aux",
    "au",
    "et",
    "sur",
    "en",
)
# Spanish, Catalan, Italian and Portuguese street types (they come before the name)
_ES_TYPES = (
    "Calle",
    "C/",
    "C.",
    "Cl.",
    "Avenida",
    "Avda.",
    "Avda",
    "Av.",
    "Avinguda",
    "Plaza",
    "Pza.",
    "Plaça",
    "Paseo",
    "Pº",
    "Passeig",
    "Camino",
    "Carretera",
    "Ctra.",
    "Ronda",
    "Travesía",
    "Trav.",
    "Travessera",
    "Glorieta",
    "Rambla",
    "Pasaje",
    "Psje.",
    "Alameda",
    "Callejón",
    "Costanilla",
    "Cuesta",
    "Urbanización",
    "Urb.",
    "Carrer",
    "Rúa",
    "Pasadizo",
    "Prolongación",
    "Calzada",
    "Cerrada",
    "Retorno",
    "Privada",
    "Peatonal",
    "Andador",
    "Circuito",
    "Viale",
    "Piazza",
    "Piazzale",
    "Vicolo",
    "Corso",
    "Strada",
    "Lungomare",
    "Contrada",
    "Borgo",
    "Rotonda",
    "Rua",
    "Travessa",
    "Praça",
    "Estrada",
    "Rodovia",
    "Ladeira",
    "Viela",
    "Pátio",
    "Sítio",
    "Favela",
    "Beco",
    "Largo",
    "Parque",
    "Jardim",
    "Quadra",
    "Setor",
    "Conjunto",
    "Eje",
    "Eje vial",
    "Calzada",
)
_ES_LOWER = ("calle", "c/", "avenida", "avda.", "paseo", "plaza", "carrer", "viale", "piazza", "rua", "avinguda")
_ES_PARTICLES = (
    "de la",
    "de las",
    "de los",
    "del",
    "de",
    "y",
    "i",
    "da",
    "das",
    "do",
    "dos",
    "di",
    "della",
    "delle",
    "dei",
    "degli",
    "e",
    "d'",
    "d’",
    "l'",
    "l’",
    "el",
    "la",
    "las",
    "los",
)
_ES_FLOOR_WORDS = (
    "bajo",
    "bj",
    "entlo",
    "entresuelo",
    "ático",
    "pral",
    "principal",
    "izq",
    "izda",
    "dcha",
    "der",
    "centro",
    "s/n",
)
# German street words: the end of a compound ("Hauptstraße") or a word of their own
_DE_SUFFIXES = (
    "straße",
    "strasse",
    "str.",
    "weg",
    "allee",
    "platz",
    "gasse",
    "damm",
    "ufer",
    "chaussee",
    "steig",
    "pfad",
    "graben",
    "zeile",
    "stieg",
    "twiete",
    "deich",
    "kai",
    "brücke",
)
_DE_WORDS = (
    "Straße",
    "Strasse",
    "Str.",
    "Weg",
    "Allee",
    "Platz",
    "Gasse",
    "Damm",
    "Ufer",
    "Chaussee",
    "Steig",
    "Pfad",
    "Graben",
    "Ring",
    "Markt",
    "Kai",
    "Brücke",
    "Deich",
    "Stieg",
    "Zeile",
    "Berg",
    "Hof",
    "Tor",
    "Wall",
    "Park",
    "Anger",
    "Feld",
    "Garten",
    "Kamp",
    "Hain",
)
# compounds ending in these are German streets too ("Kaiserring", "Am Heumarkt"), but also English
# words ("String 5", "Spring 2024"): only with a postcode tail
_DE_WEAK_ENDINGS = (
    "ring",
    "markt",
    "berg",
    "hof",
    "park",
    "tor",
    "wall",
    "feld",
    "garten",
    "kamp",
    "anger",
    "höhe",
    "grund",
    "tal",
    "hain",
    "winkel",
    "blick",
    "stein",
    "bach",
    "dorf",
    "brink",
    "horst",
    "siedlung",
    "hafen",
    "heide",
    "wiese",
    "koppel",
    "redder",
)
_DE_PREPOSITIONS = (
    "Am",
    "An der",
    "An den",
    "An dem",
    "Auf der",
    "Auf dem",
    "Auf den",
    "Im",
    "In der",
    "In den",
    "Zum",
    "Zur",
    "Unter den",
    "Hinter der",
    "Hinter dem",
    "Vor dem",
    "Vor der",
    "Beim",
    "Bei der",
    "Alt",
    "Alte",
    "Alter",
    "Unterm",
    "Überm",
    "Auf'm",
)
_JP_WARDS = ("ku", "shi", "cho", "chō", "machi", "gun", "mura", "son")
_JP_WARD_WORDS = ("City", "Ward", "Town", "Village", "Ku", "Shi")
_PO_BOX = (
    r"P\.?[ \t]?O\.?[ \t]?Box|Post[ \t]Office[ \t]Box|GPO[ \t]Box|PO[ \t]Box|Locked[ \t]Bag"
    r"|Private[ \t]Bag|Postfach|Bo[îi]te[ \t][Pp]ostale|B\.P\.|C\.P\.|Case[ \t][Pp]ostale"
    r"|Apartado(?:[ \t]de[ \t]Correos)?|Apdo\.?(?:[ \t]de[ \t]Correos)?|Caixa[ \t]Postal"
    r"|Casella[ \t]Postale|Postbus|Postboks"
)

# -- pieces --------------------------------------------------------------------------------------

_CAP = "A-ZÀ-ÖØ-ÞĀ-ſ"
_LET = "A-Za-zÀ-ÖØ-öø-ÿĀ-ſ"
_SP = r"[ \t]"
# a capitalized word ("Baker", "O'Connell", "Nishi-Shinjuku", "MAIN"), "St." before a name, an ordinal
_WORD = (
    rf"(?:[{_CAP}][{_LET}]*(?:['’][{_LET}]+)?(?:-[{_LET}]+)*"
    rf"|(?:St|Ste|Mt|Ft|Pt)\.(?={_SP}[{_CAP}])|\d{{1,3}}(?:st|nd|rd|th)\b)"
)
_NUM_START = r"(?<![\w./#+-])(?<!\d[,:])"  # not in "1.5", "3,5", "10:30", "a/5", "#5", "-5"
_NUM_END = r"(?![\w/]|[.,:]\d)"
# a house number: 221B, 12-14, 5/12, 4-123
_HOUSE = rf"{_NUM_START}\d{{1,5}}[A-Za-z]?(?:{_SP}?[-/–]{_SP}?\d{{1,5}}[A-Za-z]?)?{_NUM_END}"
_DIR = rf"(?:{_alt(_DIRECTIONS)})\b\.?"
_UNIT_WORD = rf"(?:{_alt(_cased(_UNIT_WORDS))}|H\.{_SP}?No|No)\b\.?"
# a street name's later words are not these unit words ("rue Bisson Apt. 4": the unit follows)
_NOT_UNIT = (
    r"(?!(?:Apt|APT|Apartment|Suite|SUITE|Ste|Unit|UNIT|Appartement|App|Bureau|Piso|Puerta|Depto|Dpto"
    r"|Apto|Interior|Int|Edif|Planta|Escalera)\b)"
)
_UNIT_ID = r"#?[ \t]*[A-Za-z0-9][\w/-]{0,5}\b"
_UNIT_BEFORE = rf"(?:{_UNIT_WORD}{_SP}*{_UNIT_ID}{_SP}*,?{_SP}*)"
_UNIT_AFTER = (
    rf"(?:{_SP}*,?{_SP}*(?:{_UNIT_WORD}{_SP}*{_UNIT_ID}|#{_SP}*[A-Za-z0-9][\w-]{{0,5}}\b"
    rf"|\d{{1,2}}(?:st|nd|rd|th){_SP}+(?:Floor|Fl)\b\.?)){{0,2}}"
)
_ES_FLOOR = (
    rf"(?:{_SP}*,?{_SP}*(?:\d{{1,2}}[º°ª]\.?(?:{_SP}*-?{_SP}*(?:\d{{1,2}}[º°ª]|[A-Za-z]\b"
    rf"|(?:izq|izda|dcha|der|centro|ext|int)\b\.?))?"
    rf"|(?:bajo|bj|entlo|entresuelo|ático|pral|principal)\b\.?(?:{_SP}+[A-Za-z]\b)?"
    rf"|{_UNIT_WORD}{_SP}*{_UNIT_ID})){{0,3}}"
)
_EN_SUF = rf"(?:{_alt(_cased(_EN_SUFFIXES) + list(_EN_SUFFIXES_LOWER))})\b\.?"
_ELIDED = ("'", "’")


def _particles(words) -> str:
    """A particle before a name: a word and a space, or an elided one (``l'``, ``d'``) glued to it."""
    return (
        rf"(?:(?:{_alt([p for p in words if not p.endswith(_ELIDED)])}){_SP}+"
        rf"|(?:{_alt([p for p in words if p.endswith(_ELIDED)])}))"
    )


_FR_PART = _particles(_FR_PARTICLES)
_FR_NAME = rf"{_FR_PART}?{_WORD}(?:{_SP}+{_NOT_UNIT}{_FR_PART}?{_WORD}){{0,3}}"
_FR_TYPE = rf"(?i:{_alt(_FR_TYPES)})\b\.?"
_FR_TYPE_WEAK = rf"(?i:{_alt(_FR_TYPES_WEAK)})\b"
_ES_PART = _particles(_ES_PARTICLES)
_ES_NAME = rf"{_ES_PART}?{_WORD}(?:{_SP}+{_NOT_UNIT}{_ES_PART}?{_WORD}){{0,4}}"
_ES_TYPE = rf"(?<![\w/])(?:{_alt(list(_ES_TYPES) + list(_ES_LOWER))})(?:(?<=/){_SP}?|(?<!/){_SP}+)"
_ES_NUMBER = rf"(?:(?:n[º°o]|núm|nr|no)\.?{_SP}*)?(?:{_HOUSE}|s/n\b)"

_POST_UK = r"[A-Z]{1,2}\d[A-Z\d]?[ \t]?\d[A-Z]{2}"
_POST_CA = r"[A-Z]\d[A-Z][ \t-]?\d[A-Z]\d"
_POST_JP = r"〒?[ \t]?\d{3}-\d{4}"
# a postcode after a city: UK, Canada, Japan, Brazil, US ZIP(+4), India
_POST_AFTER = rf"(?:{_POST_UK}|{_POST_CA}|{_POST_JP}|\d{{5}}-\d{{3,4}}|\d{{5}}|\d{{6}}|\d{{3}} \d{{3}})(?![\w-])"
# a postcode before a city: 5 digits (DE, FR, ES, IT; "D-10115"), Brazil / Mexico, Poland,
# 4 digits that are not a year (AT, CH, BE, NL "1012 AB", DK, NO)
_POST_LEAD = (
    r"(?:(?:[A-Z]{1,2}-)?\d{5}(?:-?\d{3,4})?|\d{8}|\d{2}-\d{3}|(?:[A-Z]{1,2}-)?(?!(?:19|20)\d\d\b)\d{4}"
    r"(?:[ \t]?[A-Z]{2}\b)?)(?![\w-])"
)
_REGION = rf"(?:[A-Z]{{2,3}}\b|\([{_CAP}][{_LET} .'-]{{1,30}}\))"
_CITY_PART = r"(?:de|da|do|dos|das|del|de[ \t]la|la|le|les|am|an[ \t]der|upon|sur|im|in[ \t]der|di|al|el)"
_CITY = rf"{_WORD}(?:{_SP}+(?!(?i:cedex)\b)(?:{_CITY_PART}{_SP}+)?{_WORD}){{0,3}}"
_STRONG = (
    rf"(?:{_POST_LEAD}{_SP}+{_CITY}(?:{_SP}+(?:(?i:cedex)(?:{_SP}+\d{{1,2}})?|{_REGION}|-{_SP}*[A-Z]{{2}}\b))?"
    rf"|{_CITY}{_SP}*,?{_SP}*(?:{_REGION}{_SP}*,?{_SP}*(?:{_POST_AFTER}|\d{{4}}\b)|(?:-{_SP}*)?{_POST_AFTER})"
    rf"|{_REGION}{_SP}+(?:{_POST_AFTER}|\d{{4}}\b)"
    rf"|(?:{_POST_UK}|{_POST_CA}|{_POST_JP})(?![\w-]))"
)
_WEAK = rf"(?:{_CITY}|{_REGION})(?={_SP}*(?:[,.;:!?)\]}}\"'\r\n]|$))"
_SEP_STRONG = rf"(?:{_SP}*,{_SP}*(?:\r?\n{_SP}*)?|{_SP}*\r?\n{_SP}*|{_SP}+)"
_SEP_WEAK = rf"{_SP}*,{_SP}*"
_TAIL = rf"(?:{_SEP_STRONG}{_STRONG}|{_SEP_WEAK}{_WEAK}){{0,4}}"
_TAIL_REQUIRED = rf"(?:{_SEP_WEAK}{_WEAK}){{0,2}}{_SEP_STRONG}{_STRONG}{_TAIL}"

_JP_KANJI = "\u4e00-\u9fff\u3400-\u4dbf々〆ヵヶ"
_JP_KATA = "\u30a1-\u30fa\u30fc"
_JP_HIRA = "\u3041-\u3096"
_JP_DIGIT = "0-9０-９"
_JP_DASH = "\\-‐‑–—−ー－"
_JP_NUM = (
    rf"(?:[{_JP_DIGIT}]{{1,4}}(?:丁目|[{_JP_DASH}])[{_JP_DIGIT}]{{1,4}}(?:番地?|[{_JP_DASH}])?"
    rf"(?:[{_JP_DIGIT}]{{1,4}}号?)?|[{_JP_DIGIT}]{{1,4}}(?:番地?|(?![{_JP_DIGIT}]))?)"
)
_JP_POST = rf"〒{_SP}?[{_JP_DIGIT}]{{3}}[{_JP_DASH}]?[{_JP_DIGIT}]{{4}}"
_JP_PREF = rf"[{_JP_KANJI}]{{2,3}}[都道府県]"
# municipality and district: kanji and katakana; with chome-ban-go after them, hiragana too
# ("日の出町", "松が谷", "あきる野市"), which without numbers would run into the prose after them
_JP_MUNI = rf"(?:[{_JP_KANJI}{_JP_KATA}]{{1,6}}?[市区町村郡])"
_JP_MUNI_NUM = rf"(?:[{_JP_KANJI}{_JP_KATA}{_JP_HIRA}]{{1,6}}?[市区町村郡])"
_JP_AREA = rf"[{_JP_KANJI}{_JP_KATA}]{{0,10}}"
_JP_AREA_NUM = rf"[{_JP_KANJI}{_JP_KATA}{_JP_HIRA}]{{0,10}}"
_JP_BUILDING = (
    rf"(?:[ 　]*[{_JP_KANJI}{_JP_KATA}{_JP_HIRA}A-Za-zＡ-Ｚａ-ｚ]{{1,16}}[{_JP_DIGIT}]{{1,4}}(?:号室|階|F)?"
    rf"|[ 　]*[{_JP_DIGIT}]{{1,4}}(?:号室|階))?"
)
# things with a street suffix's shape that are no street ("3 Google Drive folders")
_NOT_STREET = r"(?!(?:Google|Hard|Flash|Thumb|USB|External|Shared|Network|Team|Disk|Solid[ \t]State)[ \t]+Drives?\b)"
#: Japanese-script characters an address keeps in its surrogate (the shapes need them)
JP_KEPT = frozenset("都道府県市区町村郡丁目番地号室階〒")

_PATTERNS: dict[str, str] = {
    "en": (
        rf"{_UNIT_BEFORE}?{_HOUSE}{_SP}+(?:{_DIR}{_SP}+)?{_NOT_STREET}(?:{_WORD}{_SP}+){{1,4}}{_EN_SUF}"
        rf"(?:{_SP}+{_DIR})?{_UNIT_AFTER}{_TAIL}"
    ),
    "en_route": (
        rf"{_UNIT_BEFORE}?{_HOUSE}{_SP}+(?:(?:State|County|US|U\.S\.|Interstate|Farm{_SP}to{_SP}Market)"
        rf"{_SP}+)?(?:Route|Rte|Highway|Hwy|Road|Rd){_SP}+\d{{1,4}}[A-Z]?\b{_UNIT_AFTER}{_TAIL}"
    ),
    "fr": (
        rf"{_UNIT_BEFORE}?{_HOUSE}(?:{_SP}?(?:bis|ter|quater)\b|(?<=\d)[BT]\b)?{_SP}*,?{_SP}+"
        rf"(?:{_FR_TYPE}{_SP}+{_FR_NAME}|{_FR_TYPE_WEAK}{_SP}+{_FR_PART}{_FR_NAME})"
        rf"(?:{_SP}+{_DIR})?{_UNIT_AFTER}{_TAIL}"
    ),
    "fr_no_number": (rf"(?<![\w-])(?:{_FR_TYPE}|{_FR_TYPE_WEAK}){_SP}+{_FR_NAME}{_UNIT_AFTER}{_TAIL_REQUIRED}"),
    "fr_weak": (
        rf"{_UNIT_BEFORE}?{_HOUSE}(?:{_SP}?(?:bis|ter|quater)\b)?{_SP}*,?{_SP}+{_FR_TYPE_WEAK}{_SP}+"
        rf"{_FR_NAME}{_UNIT_AFTER}{_TAIL_REQUIRED}"
    ),
    "de": (
        rf"(?<![\w-])(?:(?:[{_CAP}]\.-)?[{_CAP}](?:[{_LET}]*-)*[{_LET}]*?(?i:{_alt(_DE_SUFFIXES)})"
        rf"|[{_CAP}](?:[{_LET}]*-)+(?:{_alt(_DE_WORDS)})"
        rf"|{_WORD}(?:{_SP}+{_WORD})?{_SP}+(?:{_alt(_DE_WORDS)}))"
        rf"{_SP}+(?:Nr\.{_SP}*)?{_HOUSE}{_UNIT_AFTER}{_TAIL}"
    ),
    "de_preposition": (
        rf"(?<![\w-])(?:{_alt(_DE_PREPOSITIONS)}){_SP}+{_WORD}(?:{_SP}+{_WORD})?{_SP}+"
        rf"(?!(?:19|20)\d\d\b){_HOUSE}{_UNIT_AFTER}{_TAIL}"
    ),
    "de_weak": (
        rf"(?<![\w-])[{_CAP}][{_LET}]*?(?:{_alt(_DE_WEAK_ENDINGS)}){_SP}+{_HOUSE}{_UNIT_AFTER}"
        rf"{_TAIL_REQUIRED}"
    ),
    "es": rf"{_ES_TYPE}{_ES_NAME}(?:{_SP}*,)?{_SP}*{_ES_NUMBER}{_ES_FLOOR}{_TAIL}",
    "es_no_number": rf"{_ES_TYPE}{_ES_NAME}{_TAIL_REQUIRED}",
    "jp": (
        rf"{_UNIT_BEFORE}?{_NUM_START}(?:\d{{1,2}}{_SP}?-?(?i:ch[oō]me)[ \t-]?\d{{1,4}}"
        rf"(?:{_SP}?-{_SP}?\d{{1,4}}){{0,2}}|\d{{1,4}}(?:{_SP}?-{_SP}?\d{{1,4}}){{1,2}}){_NUM_END}"
        rf",?{_SP}+{_WORD}(?:{_SP}+{_WORD})?"
        rf"(?:{_SP}*,{_SP}*[{_CAP}][{_LET}]*(?:-[{_CAP}][{_LET}]*)?(?:-(?:{_alt(_JP_WARDS)})\b"
        rf"|{_SP}+(?:{_alt(_JP_WARD_WORDS)})\b)|{_SEP_STRONG}{_STRONG}){_TAIL}"
    ),
    "jp_name_first": (
        rf"(?<![\w-]){_WORD}{_SP}+\d{{1,4}}(?:-\d{{1,4}}){{1,2}}{_NUM_END}{_SP}*,{_SP}*"
        rf"[{_CAP}][{_LET}]*(?:-[{_CAP}][{_LET}]*)?(?:-(?:{_alt(_JP_WARDS)})\b"
        rf"|{_SP}+(?:{_alt(_JP_WARD_WORDS)})\b){_TAIL}"
    ),
    "jp_script": (
        rf"(?:{_JP_POST}[ 　]*)?(?:{_JP_PREF})?{_JP_MUNI_NUM}{{1,2}}{_JP_AREA_NUM}?{_JP_NUM}{_JP_BUILDING}"
        rf"|{_JP_POST}[ 　]*(?:{_JP_PREF})?(?:{_JP_MUNI}{{1,2}}{_JP_AREA})?"
        rf"|{_JP_PREF}{_JP_MUNI}{{1,2}}{_JP_AREA}"
    ),
    "po_box": (
        rf"(?<![\w.])(?:{_PO_BOX}|(?i:p\.?{_SP}?o\.?{_SP}?box)){_SP}*(?:No\.?{_SP}*)?#?{_SP}*"
        rf"\d{{1,6}}(?:{_SP}\d{{2,4}}){{0,2}}\b{_UNIT_AFTER}{_TAIL}"
    ),
    "us_military": (
        rf"(?<![\w.])(?:(?:PSC|CMR|Unit|USNS|USNV|USS|USCGC){_SP}+[\w .-]{{1,30}}?,?{_SP}*)?"
        rf"(?:Box{_SP}+\d{{1,5}},?{_SP}*)?(?:APO|FPO|DPO){_SP}+(?:AA|AE|AP){_SP}+\d{{5}}(?:-\d{{4}})?\b"
    ),
    "postcode": (
        rf"(?<![\w-])(?:(?:AB|BC|MB|NB|NL|NS|NT|NU|ON|PE|QC|SK|YT){_SP}+{_POST_CA}"
        rf"|[A-Z]{{1,2}}\d[A-Z\d]?{_SP}\d[A-Z]{{2}}|(?:NSW|VIC|QLD|TAS){_SP}+\d{{4}}|{_JP_POST})(?![\w-])"
    ),
    "po_box_short": rf"(?<![\w.])(?:BP|CP){_SP}+\d{{1,6}}\b{_TAIL_REQUIRED}",
    "loose": (
        rf"(?:(?:{_UNIT_BEFORE}(?:{_HOUSE}{_SP}*,?{_SP}*)?|{_HOUSE}{_SP}*,?{_SP}+)"
        rf"{_WORD}(?:{_SP}+{_ES_PART}?{_WORD}){{0,3}}(?:{_SP}*,?{_SP}*{_HOUSE}(?:{_SP}+\d{{1,5}}\b)?)?"
        rf"|(?<![\w-]){_WORD}(?:{_SP}+{_ES_PART}?{_WORD}){{1,3}}{_SP}*,?{_SP}+{_HOUSE}(?:{_SP}+\d{{1,5}}\b)?"
        rf"|(?<![\w-])(?:{_WORD}{_SP}+){{0,3}}{_EN_SUF})"
        rf"{_UNIT_AFTER}{_ES_FLOOR}{_TAIL_REQUIRED}"
    ),
}
# the characters a match of each shape can start with: checked first, they skip most positions
# of a text at the cost of one character test
_STARTS = {
    "fr_no_number": "a-zA-Zà-ÿ",
    "es": f"{_CAP}a-z",
    "es_no_number": f"{_CAP}a-z",
    "jp_script": f"〒{_JP_KANJI}{_JP_KATA}{_JP_HIRA}",
    "po_box": f"{_CAP}p",
}
# shapes whose match is dropped when it starts before another shape's match inside it with no
# digit in between: "loose" runs into words before a street line ("Contact Hans Müller
# Hauptstraße 12, 10115 Berlin"), which then stay the NER's to find
_FALLBACK = frozenset({"loose", "postcode"})
_DIGIT = re.compile(r"\d")
_COMPILED = tuple((name, re.compile(rf"(?=[{_STARTS.get(name, _CAP + '0-9')}])" + rx)) for name, rx in _PATTERNS.items())


def _words_of(alternatives: tuple[str, ...] | list[str]) -> set[str]:
    return {w.lower().strip(".'’/") for a in alternatives for w in re.split(r"[ \t]+", a) if w.strip(".'’/")}


#: words an address keeps in its surrogate (lower case): street suffixes and types, unit and PO
#: box words, directions, particles, German street words, romaji ward words, Australian state
#: codes (as US ones are kept), US military mail words
STREET_WORDS = frozenset(
    _words_of(_EN_SUFFIXES)
    | _words_of(_EN_SUFFIXES_LOWER)
    | _words_of(_DIRECTIONS)
    | _words_of(_UNIT_WORDS)
    | _words_of(_FR_TYPES)
    | _words_of(_FR_TYPES_WEAK)
    | _words_of(_FR_PARTICLES)
    | _words_of(_ES_TYPES)
    | _words_of(_ES_LOWER)
    | _words_of(_ES_PARTICLES)
    | _words_of(_ES_FLOOR_WORDS)
    | _words_of(_DE_SUFFIXES)
    | _words_of(_DE_WORDS)
    | _words_of(_DE_PREPOSITIONS)
    | _words_of(_JP_WARDS)
    | _words_of(_JP_WARD_WORDS)
    | {
        "po",
        "p",
        "o",
        "box",
        "gpo",
        "locked",
        "private",
        "bag",
        "postfach",
        "boîte",
        "postale",
        "case",
        "apartado",
        "apdo",
        "correos",
        "caixa",
        "postal",
        "casella",
        "postbus",
        "postboks",
        "bp",
        "cp",
        "bis",
        "ter",
        "quater",
        "cedex",
        "chome",
        "state",
        "county",
        "interstate",
        "route",
        "highway",
        "saint",
        "sainte",
        "san",
        "santa",
        "santo",
        "nr",
        "no",
        "núm",
        "nº",
        "floor",
        "h",
        "nsw",
        "vic",
        "qld",
        "tas",
        "act",
        "usa",
        "via",
        "psc",
        "cmr",
        "apo",
        "fpo",
        "dpo",
        "usns",
        "usnv",
        "uss",
        "uscgc",
    }
)
#: German compounds end in one of these (lower case): a surrogate keeps the ending
DE_COMPOUND_ENDINGS = tuple(sorted({s.rstrip(".") for s in _DE_SUFFIXES + _DE_WEAK_ENDINGS}, key=len, reverse=True))


class AddressRecognizer(EntityRecognizer):
    """``STREET_ADDRESS`` by shape (see the module docstring): the longest of overlapping matches."""

    def __init__(self) -> None:
        super().__init__(supported_entities=[ADDRESS_ENTITY], name="street_address_recognizer", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text, entities, nlp_artifacts=None):  # noqa: D102 (presidio's signature)
        return [RecognizerResult(ADDRESS_ENTITY, start, end, SCORE) for start, end in find_addresses(text)]


def find_addresses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each address in ``text``, without overlaps, in order."""
    spans: list[tuple[bool, int, int]] = []
    for name, rx in _COMPILED:
        for m in rx.finditer(text):
            start, end = m.span()
            while end > start and text[end - 1] in " \t\r\n,;":
                end -= 1
            if end > start:
                spans.append((name in _FALLBACK, start, end))
    # a fallback match that starts before another shape's match inside it, with no digit before
    # that match, ran into the words before a street line: dropped
    starts = [start for fallback, start, _end in spans if not fallback]
    kept: list[tuple[int, int]] = []
    for fallback, start, end in sorted(spans, key=lambda s: (s[1] - s[2], s[1])):
        if fallback and any(start < a < end and not _DIGIT.search(text, start, a) for a in starts):
            continue
        if all(end <= a or start >= b for a, b in kept):
            kept.append((start, end))
    return sorted(kept)
