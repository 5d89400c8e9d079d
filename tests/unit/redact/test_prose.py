"""Secrets in prose (PASSWORD) and names in fixed shapes (PERSON), with the real analyzer.

Three parts: each form the rules name is found with the right span; what is not a secret or a
name (placeholders, code that reads a secret, prose about passwords, "Python's", "Hi team") is
not flagged; and two hand-written evaluation sets (not from examples.pii_corpus: names from many
origins, secrets in six languages and config formats), the second written and measured blind
before the fixes it led to; their recall is printed with -s and held to floors.
"""

from __future__ import annotations

import pytest

from redact.analyzer import TextAnalyzer


@pytest.fixture(scope="module")
def analyzer():
    return TextAnalyzer()


def _spans(analyzer, text, entity):
    return [text[f.start : f.end] for f in analyzer.analyze(text) if f.entity == entity]


# --- rule 4: the value only, with its exact span --------------------------------------------------
SECRET_FORMS = [
    ("my password is hunter2!", "hunter2!"),
    ("pw: Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("the passcode 4417", "4417"),
    ("ok, use token=abc123def for the staging box", "abc123def"),
    ("API key: 9f8e7d6c", "9f8e7d6c"),
    ("The password for the admin account is Xyz123.", "Xyz123"),
    ("I typed the password Qm7!pz by hand too", "Qm7!pz"),
    ("Tr0ub4dor&3 is my password", "Tr0ub4dor&3"),
    ("Mein Passwort ist Sonne2024!", "Sonne2024!"),
    ("le mot de passe est Soleil!99", "Soleil!99"),
    ("la contraseña es Gato2020", "Gato2020"),
    ("a senha do banco é abc12345", "abc12345"),
    ("het wachtwoord is Zomer2024", "Zomer2024"),
    ("Die PIN lautet 4711.", "4711"),
    ("DB_PASSWORD=s3cr3t", "s3cr3t"),
    ('export OPENAI_API_KEY="sk-abc123"', "sk-abc123"),
    ('{"client_secret": "x7Hq9Lm2Pz", "client_id": "app"}', "x7Hq9Lm2Pz"),
    ("db:\n  user: app\n  password: hunter2\n", "hunter2"),
    ("[database]\npassword = Winter!2023\n", "Winter!2023"),
    ("JWT_SECRET=supersecret", "supersecret"),
    ("Server=db1;Database=crm;User Id=sa;Password=Secr3t;Encrypt=true", "Secr3t"),
    ("mysql --password hunter22 -h db", "hunter22"),
    ("X-Api-Key: 1f2e3d4c5b6a", "1f2e3d4c5b6a"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("<password>hunter22</password>", "hunter22"),
    ("password: changeme", "changeme"),  # a default password still opens the system
]


@pytest.mark.parametrize("text,value", SECRET_FORMS)
def test_secret_forms_are_found_with_the_value_as_span(analyzer, text, value):
    assert _spans(analyzer, text, "PASSWORD") == [value]


NOT_SECRETS = [
    "password = getpass()",
    "conn = connect(user=user, password=password)",
    "token=self.token",
    'DB_PASSWORD = os.environ["DB_PASSWORD"]',
    'print(f"logging in with {password}")',
    "password: ${DB_PASSWORD}",
    "password: <password>",
    "password: ***",
    "API_KEY=YOUR_API_KEY",
    "api_key: Optional[str] = None",
    "password: str",
    "Please reset your password via the link.",
    "The token expired, so I requested a new one.",
    "The password must be at least 12 characters long.",
    "the password is required",
    "max_tokens: 2048",
    "The token 50256 marks the end of text.",
    '{"token": "Hello", "logprob": -0.12}',
    "PASSWORD_MIN_LENGTH=12",
    "pin the version to 2.31.0 in requirements.txt",
    "SESSION_SECRET_SHA256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "AUTH_URL=https://login.example.com/oauth2",
    "Don't share your password with anyone.",
    "Tokens are counted per request; max_tokens caps the output.",
    "password_hash = bcrypt.hashpw(password.encode(), salt)",
    "if (!token) { return res.status(401).send('missing token'); }",
    "Set PASSWORD in your CI secrets, never in the repo.",
    "The PIN pad on the terminal is broken.",
    "the secret sauce is patience",
    "auth_token = request.headers.get('Authorization')",
    "Use the `--password-stdin` flag with docker login.",
    "the status code is 404",
    "error code: 1234",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_code_placeholders_and_prose_about_passwords_are_not_secrets(analyzer, text):
    assert _spans(analyzer, text, "PASSWORD") == []


# --- rule 5: the name only (no title, no greeting, no "'s") ---------------------------------------
NAME_FORMS = [
    ("Hi Oluwaseun,\ncould you resend the invoice?", ["Oluwaseun"]),
    ("Hello Thandiwe Mokoena, your appointment is confirmed.", ["Thandiwe Mokoena"]),
    ("Dear Ms Nakashima,\nthank you for your application.", ["Nakashima"]),
    ("Dear Dr. Aleksander Wiśniewski,\nplease find the report attached.", ["Aleksander Wiśniewski"]),
    ("Thanks, Ngozi", ["Ngozi"]),
    ("Thank you, Björn!", ["Björn"]),
    ("Best, Lukas", ["Lukas"]),
    ("The fix is merged.\n\nRegards,\nSiobhán O'Neill", ["Siobhán O'Neill"]),
    ("cc: Rahul Venkataraman, Leilani Kahale", ["Rahul Venkataraman", "Leilani Kahale"]),
    ("I got an email from Kofi Boateng about the move.", ["Kofi Boateng"]),
    ("On Tue, 3 Sep 2024 at 09:12 Ingrid Solberg <ingrid@fjord.example> wrote:", ["Ingrid Solberg"]),
    ("Please update Mariana's phone number.", ["Mariana"]),
    ("Ask Mr. Abernathy about it.", ["Abernathy"]),
    ("Dear Mr van der Hoeven,\nwe received your complaint.", ["van der Hoeven"]),
    ("Hi Abdullah al-Saud, welcome aboard!", ["Abdullah al-Saud"]),
    ("Hola Ximena y Joaquín, ¿cómo están?", ["Ximena", "Joaquín"]),
]


@pytest.mark.parametrize("text,names", NAME_FORMS)
def test_name_forms_are_found_with_the_name_as_span(analyzer, text, names):
    found = _spans(analyzer, text, "PERSON")
    for name in names:
        assert name in found, (name, found)


NOT_NAMES = [
    ("Python's type hints make this easier.", "Python"),
    ("Monday's standup is cancelled.", "Monday"),
    ("Hi team, the deploy is done.", "team"),
    ("Hello World!", "World"),
    ("Dear Sir or Madam,\nI am writing to complain.", "Sir"),
    ("Thanks, that fixed it.", "that"),
    ("Summarize this ticket and suggest a reply.", "Summarize"),
    ("Convert this JSON to a CSV file.", "Convert"),
    ("Customer Success Team, phone 555 0100", "Success"),
    ("class UserManager:\n    pass\n# a class called UserManager", "UserManager"),
    ("Dear Diary, today was long.", "Diary"),
    ("Regards,\nThe Platform Team", "Platform"),
    ("Hi all, the API key rotation is scheduled for Friday.", "all"),
]


@pytest.mark.parametrize("text,word", NOT_NAMES)
def test_words_that_name_no_one_are_not_names(analyzer, text, word):
    at = text.index(word)
    assert not [f for f in analyzer.analyze(text) if f.entity == "PERSON" and f.start < at + len(word) and f.end > at]


def test_a_found_name_is_a_name_elsewhere_in_the_text(analyzer):
    text = "Dear Jean-Luc Moreau,\nas agreed, Moreau's team and Jean-Luc will join on Friday."
    found = [(text[f.start : f.end], f.start) for f in analyzer.analyze(text) if f.entity == "PERSON"]
    assert [v for v, _ in found].count("Moreau") == 1 and [v for v, _ in found].count("Jean-Luc") == 1, found


# --- a hand-written evaluation set: recall per kind ------------------------------------------------
# (text, [(kind, value)]); kinds: "full" (two or more words), "single" (one word: a first name after
# a greeting, a surname after a title), "secret"
EVAL_SET: list[tuple[str, list[tuple[str, str]]]] = [
    ("Hi Oluwaseun,\nCould you resend the invoice from last week?", [("single", "Oluwaseun")]),
    ("Hello Thandiwe Mokoena, your appointment is confirmed for Tuesday.", [("full", "Thandiwe Mokoena")]),
    ("Dear Ms Nakashima,\nThank you for your application.", [("single", "Nakashima")]),
    ("Dear Dr. Aleksander Wiśniewski,\nplease find the lab report attached.", [("full", "Aleksander Wiśniewski")]),
    ("Thanks, Ngozi", [("single", "Ngozi")]),
    ("That works for me. Thank you, Björn!", [("single", "Björn")]),
    (
        "Let me know.\n\nKind regards,\nMarie-Claire Dubois-Lefèvre\nHead of Procurement",
        [("full", "Marie-Claire Dubois-Lefèvre")],
    ),
    ("cc: Rahul Venkataraman, Leilani Kahale", [("full", "Rahul Venkataraman"), ("full", "Leilani Kahale")]),
    ("Also cc Zhang Wei on this thread.", [("full", "Zhang Wei")]),
    ("I got a message from Kofi Boateng about the server move.", [("full", "Kofi Boateng")]),
    ("On Tue, 3 Sep 2024 at 09:12, Ingrid Solberg <ingrid.solberg@fjord.example> wrote:\n> done", [("full", "Ingrid Solberg")]),
    ("Siddharth wrote:\n> the build is green now", [("single", "Siddharth")]),
    ("Can you check Mr. Abernathy's flight times?", [("single", "Abernathy")]),
    ("Please update Mariana's phone number to the new one.", [("single", "Mariana")]),
    ("Ask Prof. Adaeze Okonkwo-Eze whether the lab is free.", [("full", "Adaeze Okonkwo-Eze")]),
    ("Hallo Jürgen,\nkannst du mir bei der Steuererklärung helfen?", [("single", "Jürgen")]),
    ("Bonjour Anaïs, merci pour ton retour.", [("single", "Anaïs")]),
    ("Hola Ximena y Joaquín, ¿cómo están?", [("single", "Ximena"), ("single", "Joaquín")]),
    ("Olá João, tudo bem?", [("single", "João")]),
    ("Beste Sanne,\nhierbij de offerte.", [("single", "Sanne")]),
    ("Dear Mr van der Hoeven,\nwe received your complaint.", [("full", "van der Hoeven")]),
    ("Hi Abdullah al-Saud, welcome aboard!", [("full", "Abdullah al-Saud")]),
    ("Regards,\nMuhammad bin Tariq", [("full", "Muhammad bin Tariq")]),
    ("Cheers,\nSeo-yeon", [("single", "Seo-yeon")]),
    ("Hey Tomasz! Are we still on for lunch?", [("single", "Tomasz")]),
    ("my name is Chidinma Eze and I need to change my address", [("full", "Chidinma Eze")]),
    ("Thanks Priyanka!", [("single", "Priyanka")]),
    ("Good morning Ebru, the shipment left the warehouse today.", [("single", "Ebru")]),
    ("Hi Nguyễn Thị Mai,\nyour visa letter is ready.", [("full", "Nguyễn Thị Mai")]),
    ("Sounds good.\n— Aroha Ngata", [("full", "Aroha Ngata")]),
    ("Liebe Frau Schäfer,\nanbei die Unterlagen.", [("single", "Schäfer")]),
    ("Please forward this to Dr Okafor's assistant.", [("single", "Okafor")]),
    ("Sincerely,\nFionnuala O'Sullivan", [("full", "Fionnuala O'Sullivan")]),
    ("Dear Dr. José María de la Fuente,", [("full", "José María de la Fuente")]),
    ("Hi Kwabena and Efua,\nthe tickets are booked.", [("single", "Kwabena"), ("single", "Efua")]),
    ("I had a call from Svetlana Kuznetsova: the contract is signed.", [("full", "Svetlana Kuznetsova")]),
    ("Dear Tanvir,\nyour refund of 40 EUR was approved.", [("single", "Tanvir")]),
    ("Best regards,\nKeoni Akana", [("full", "Keoni Akana")]),
    ("Hi Aigerim, can you review the PR?", [("single", "Aigerim")]),
    ("Dear Mrs. Papadopoulou,\nyour order has shipped.", [("single", "Papadopoulou")]),
    # secrets
    ("my wifi password is Blue-Heron-42, don't share it", [("secret", "Blue-Heron-42")]),
    ("pw: Kx9#mQ2!vL", [("secret", "Kx9#mQ2!vL")]),
    ("The PIN for the side door is 8831.", [("secret", "8831")]),
    ("use this token: ghx7Yq2LmP0s9Rtv", [("secret", "ghx7Yq2LmP0s9Rtv")]),
    ("API key = 4be1c7e2d9f04a6b", [("secret", "4be1c7e2d9f04a6b")]),
    ("Passwort: Wasserfall77", [("secret", "Wasserfall77")]),
    ("Mon mot de passe est Baguette!2023", [("secret", "Baguette!2023")]),
    ("Mi contraseña es Tortuga_88", [("secret", "Tortuga_88")]),
    ("A senha do wifi é cafe1234", [("secret", "cafe1234")]),
    ("Mijn wachtwoord is Fiets!2019", [("secret", "Fiets!2019")]),
    ("export STRIPE_WEBHOOK_SECRET=whsec_9aXb2Lq7Rt", [("secret", "whsec_9aXb2Lq7Rt")]),
    ("```\n# .env\nDB_HOST=db.internal\nDB_PASS=Qu4ntum-Leap\n```", [("secret", "Qu4ntum-Leap")]),
    ("database:\n  user: app\n  password: Orchid7Lantern\n", [("secret", "Orchid7Lantern")]),
    ('{"username": "svc", "client_secret": "c1i3nt-S3cr3t-v4lue"}', [("secret", "c1i3nt-S3cr3t-v4lue")]),
    ("curl -H 'X-API-Key: 73fa0c1d2e9b48aa' https://api.internal/v1/items", [("secret", "73fa0c1d2e9b48aa")]),
    ("mysql -u root --password Tr1cky#Pass", [("secret", "Tr1cky#Pass")]),
    ("I typed the password Gr33nT3a! by hand too", [("secret", "Gr33nT3a!")]),
    ("Zz9!x8Yy is my password for the VPN", [("secret", "Zz9!x8Yy")]),
    ("the one-time code 552190 expires in 5 minutes", [("secret", "552190")]),
    ("Server=db01;Database=crm;User Id=sa;Password=Sql!Serv3r;", [("secret", "Sql!Serv3r")]),
    ("la clave de acceso es Lince-2024", [("secret", "Lince-2024")]),
    ('the passphrase is "correct horse battery staple"', [("secret", "correct horse battery staple")]),
    ('$env:GITLAB_TOKEN = "glpat-x8Yq2LmP0s9Rtv7"', [("secret", "glpat-x8Yq2LmP0s9Rtv7")]),
]
# written in full before any run against it, then measured once: full 12/14, single 14/16, secrets
# 15/20; the misses led to "Hello again X", "-- \n" signatures, Aunt / Uncle titles, "clave",
# "senha nova é", auth=("user", "pw") pairs, PGPASSWORD-style names and door codes ("the code for
# the garage is 7314"); "Alejandro Ruiz-Tagle" (no context at all) is still missed
BLIND_SET: list[tuple[str, list[tuple[str, str]]]] = [
    ("hey Marisol, quick question about the rota", [("single", "Marisol")]),
    ("Good afternoon Mr. Adeyemi, I'm following up on my claim.", [("single", "Adeyemi")]),
    ("Thanks so much, Hyun-woo!", [("single", "Hyun-woo")]),
    ("Warm regards,\nIsabela Cavalcanti\nCustomer Care", [("full", "Isabela Cavalcanti")]),
    ("Hi Dmitri and Oksana, the slides are in the shared drive.", [("single", "Dmitri"), ("single", "Oksana")]),
    (
        "Please cc Marguerite Fontaine and Tobias Lindqvist on the reply.",
        [("full", "Marguerite Fontaine"), ("full", "Tobias Lindqvist")],
    ),
    ("Forwarding a voicemail from Kenji Watanabe regarding the lease.", [("full", "Kenji Watanabe")]),
    ("Anneliese Brandt <a.brandt@werk.example> schrieb:\n> Bitte prüfen", [("full", "Anneliese Brandt")]),
    ("What's Rosalind's email again?", [("single", "Rosalind")]),
    ("Dear Professor Mbeki,\nI am applying for the PhD position.", [("single", "Mbeki")]),
    ("I'm meeting with Dr. Farah Haddad on Thursday.", [("full", "Farah Haddad")]),
    ("Sign it from Alejandro Ruiz-Tagle, our CFO.", [("full", "Alejandro Ruiz-Tagle")]),
    ("Kind regards, Tamar Ben-David", [("full", "Tamar Ben-David")]),
    ("Bonsoir Léa, ton colis est arrivé.", [("single", "Léa")]),
    ("Prezado Sr. Albuquerque,\nsegue o contrato.", [("single", "Albuquerque")]),
    ("My colleague Ayesha Siddiqui will join the call.", [("full", "Ayesha Siddiqui")]),
    ("Can you write a birthday note for my wife Keiko?", [("single", "Keiko")]),
    ("Cheers, Finn", [("single", "Finn")]),
    ("The account holder is Bartholomew Achterberg.", [("full", "Bartholomew Achterberg")]),
    ("Hello again Wanjiru! Hope the move went well.", [("single", "Wanjiru")]),
    ("Message from Giulia Bianchi: the server is down again.", [("full", "Giulia Bianchi")]),
    ("Ms. Oyelaran's flight lands at 6.", [("single", "Oyelaran")]),
    ("We hired Rohan Mehta-Kapoor last week.", [("full", "Rohan Mehta-Kapoor")]),
    ("Yours sincerely,\nEleanor Whitfield-Hayes", [("full", "Eleanor Whitfield-Hayes")]),
    ("Ciao Matteo, ci vediamo domani?", [("single", "Matteo")]),
    ("Thanks for the help.\n-- \nPieter-Jan De Smet", [("full", "Pieter-Jan De Smet")]),
    ("Hi Mx. Rivera-Soto, your pronouns are updated.", [("single", "Rivera-Soto")]),
    ("Ask Aunt Hermione if she can babysit.", [("single", "Hermione")]),
    ("the wifi password at the cabin is Pinecone!77", [("secret", "Pinecone!77")]),
    ("Login: admin / Password: Sunfl0wer#", [("secret", "Sunfl0wer#")]),
    ("my bank PIN is 0429, please forget it", [("secret", "0429")]),
    ("export ANTHROPIC_API_KEY=ak-live-93jfL2pQ", [("secret", "ak-live-93jfL2pQ")]),
    ("env:\n  GITHUB_TOKEN: ghs_5kLmN8pQ2rS4tU6v\n", [("secret", "ghs_5kLmN8pQ2rS4tU6v")]),
    ('redis:\n  host: cache.internal\n  auth: "r3d1s-Auth-Key"\n', [("secret", "r3d1s-Auth-Key")]),
    ("The code for the garage is 7314.", [("secret", "7314")]),
    ("Votre code PIN est 9921.", [("secret", "9921")]),
    ("Das Kennwort für den Router lautet Eichhörnchen42", [("secret", "Eichhörnchen42")]),
    ("Mi clave es perro.Azul.7", [("secret", "perro.Azul.7")]),
    ("Minha senha nova é Tucano#2025", [("secret", "Tucano#2025")]),
    ("Het wachtwoord van de NAS is Molen_88", [("secret", "Molen_88")]),
    ("./deploy --api-key=pk_9d8c7b6a5f4e", [("secret", "pk_9d8c7b6a5f4e")]),
    ('requests.post(url, auth=("svc", "Wint3r-Is-Coming"))', [("secret", "Wint3r-Is-Coming")]),
    ("token: 8f14e45fceea167a5a36dedd4bea2543", [("secret", "8f14e45fceea167a5a36dedd4bea2543")]),
    ("here is the session secret: Qz8!LmN0pR", [("secret", "Qz8!LmN0pR")]),
    ("PGPASSWORD=Kiwi-Fruit-55 psql -h db -U app", [("secret", "Kiwi-Fruit-55")]),
    ("The passphrase is 'tangerine sky over Lisbon'", [("secret", "tangerine sky over Lisbon")]),
    ("Your verification code is 662018.", [("secret", "662018")]),
    ("client_secret=aZ3-kP9_mQ7~xR2", [("secret", "aZ3-kP9_mQ7~xR2")]),
]
RECALL_FLOOR = {"full": 0.95, "single": 0.95, "secret": 0.99}


def test_password_surrogates_keep_the_token_count():
    """A PASSWORD value gets the generic surrogate (random characters of the same classes); its
    token count is the original's."""
    pytest.importorskip("faker")
    from redact.key import RedactionKey
    from redact.surrogates import Surrogates
    from replay.tokenizer import load_tokenizer

    surrogates = Surrogates(RedactionKey(b"test-key-0123456789abcdef"), load_tokenizer("gpt2"))
    values = [v for _, v in SECRET_FORMS] + [v for _, vs in EVAL_SET + BLIND_SET for kind, v in vs if kind == "secret"]
    for value in values:
        out, off = surrogates.make("PASSWORD", value)
        assert out != value and not off, (value, out)
        assert [c.isdigit() for c in out] == [c.isdigit() for c in value], (value, out)


def test_recall_on_the_hand_written_set(analyzer):
    assert len(EVAL_SET) >= 40 and len(BLIND_SET) >= 40
    hit, total, missed = {}, {}, []
    for text, values in EVAL_SET + BLIND_SET:
        spans = analyzer.analyze(text)
        for kind, value in values:
            at = text.index(value)
            covered = all(any(f.start <= i < f.end for f in spans) for i in range(at, at + len(value)) if not text[i].isspace())
            total[kind] = total.get(kind, 0) + 1
            hit[kind] = hit.get(kind, 0) + covered
            if not covered:
                missed.append((kind, value))
    print("\nkind     labelled  recall")
    for kind in sorted(total):
        print(f"{kind:8s} {total[kind]:8d}  {hit[kind] / total[kind]:6.3f}")
    print("missed:", missed)
    for kind, floor in RECALL_FLOOR.items():
        assert hit[kind] / total[kind] >= floor, (kind, missed)
