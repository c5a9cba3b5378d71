"""The words the reader's rules look for, in six languages (en, es, fr, de, pt, it): what
introduces an order number, what opens a quoted part, what says a day was promised and when it
came. Why the customer writes is the trained classifier's to read (intake/reader/trained.py).

Every entry is written without accents and in lower case: the reader compares against the
message folded the same way (intake/reader/text.py), so "reçu", "recu" and "REÇU" are one word.
A phrase is a regular expression over that folded text, matched on word boundaries."""

from __future__ import annotations

# --- the words that introduce an order number --------------------------------------------------
# "order 1042", "order no. 1042", "pedido 1042", "commande n° 1042", "Bestellung 1042",
# "encomenda 1042", "ordine 1042", and their plurals and "number of the order" forms.
ORDER_WORDS = (
    r"orders?",
    r"order\s+(?:number|no|nr|num|id|ref(?:erence)?)s?",
    r"purchases?|compras?|achats?|kaufs?|acquist[oi]",
    r"ord|ordr",
    r"pedidos?",
    r"(?:numero|n[o°º])\s+(?:de\s+)?pedido",
    r"commandes?",
    r"(?:numero|n[o°º])\s+(?:de\s+)?(?:la\s+)?commande",
    r"bestellung(?:en)?",
    r"bestell(?:ungs)?(?:nummer|nr)",
    r"auftrag(?:s(?:nummer|nr))?",
    r"encomendas?",
    r"(?:numero|n[o°º])\s+da\s+encomenda",
    r"ordine|ordini",
    r"(?:numero|n[o°º])\s+(?:dell\s*'?\s*)?ordine",
    r"ordem",
)
# What may stand between such a word and the number: "order no. 1042", "order number is 1042",
# "commande n° 1042", "Bestellung Nr. 1042", "pedido nº 1042", "order: #1042".
ORDER_FILLER = (
    r"(?:\s*(?:[:#,]|no\b\.?|n\b\.?|nr\b\.?|confirmation\b|num\b\.?|number\b|nummer\b|"
    r"numero\b|n\s?[°º]|n[o°º]\b\.?|"
    r"id\b|ref\b\.?|is\b|was\b|es\b|est\b|ist\b|e\b|era\b|war\b|"
    r"de\b|da\b|di\b|del\b|dell'|du\b)){0,4}\s*"
)
# Joining a list of numbers: "1042, 1044 and 1047", "1042 y 1044", "1042 et 1044", "1042 und 1044".
# The spaces between two joiners belong to the first one only: "(?:\s*,\s*)+" could split each
# run of spaces two ways, and "order 1042,  ,  , ..." took 2^n tries (30 commas: hours).
LIST_JOINERS = (
    r"\s*(?:(?:,|;|/|&|\+|\band\b|\bor\b|\by\b|\bo\b|\be\b|\bet\b|\bou\b|\bund\b|\boder\b)\s*)+"
)

# A number right after one of these is never an order number, even after "#": a tracking, phone,
# ticket or invoice number, a house or flat, a postcode.
NOT_ORDER_WORDS = (
    r"tracking|track|trk|seguimiento|suivi|sendungsnummer|sendungsverfolgung|rastreamento|"
    r"rastreio|spedizione|tracciamento|shipment|parcel|package|paquete|colis|paket|pacote|"
    r"pacco|waybill|awb|phone|tel|telephone|telefono|telefone|mobile|cell|movil|portable|handy|"
    r"whatsapp|fax|ticket|case|invoice|factura|facture|rechnung|fatura|fattura|receipt|"
    r"apt|apartment|flat|suite|unit|house|street|st|avenue|ave|road|rd|calle|rue|strasse|rua|"
    r"via|zip|postcode|postal|post\s+code|cp|plz|cep|cap|code|pin|card|iban|account|sku|"
    r"item|article|artikel|model|ref\s+produit|serial|batch|lot|room|box|gate|vol|flight"
)

# A day right after one of these is no day said: "it didn't come on Monday".
NEGATIONS = (
    r"not|n'?t|never|no|wasn'?t|isn'?t|without|pas|nicht|kein|keine|non|nao|ni|sin|sans|ohne|"
    r"senza|sem"
)

# Lines that open a quoted or forwarded part of a message: the customer's own words end there.
# "On <date>, <name> <address> wrote:" may be wrapped onto a second line by the mail program.
_WRAPPED = r"[^\n]{0,120}(?:\n[^\n]{0,120})?"
QUOTE_OPENERS = (
    r"-{2,}\s*(?:forwarded|original|mensaje\s+reenviado|message\s+transfere|"
    r"weitergeleitete\s+nachricht|mensagem\s+encaminhada|messaggio\s+inoltrato|"
    r"mensaje\s+original|message\s+d'?origine|ursprungliche\s+nachricht|"
    r"mensagem\s+original|messaggio\s+originale)[^\n]*",
    r"begin\s+forwarded\s+message:?",
    r"on\s" + _WRAPPED + r"\swrote:\s*",
    r"el\s" + _WRAPPED + r"\sescribio:\s*",
    r"le\s" + _WRAPPED + r"\sa\s+ecrit\s*:\s*",
    r"am\s" + _WRAPPED + r"\sschrieb[^\n]{0,80}(?:\n[^\n]{0,80})?:\s*",
    r"em\s" + _WRAPPED + r"\sescreveu:\s*",
    r"il\s" + _WRAPPED + r"\sha\s+scritto:\s*",
    r"from:\s.+\n\s*(?:sent|date|to|subject):.*",
    r"de\s*:\s.+\n\s*(?:enviado|envoye|date|para|a|objet|asunto)\s*:.*",
    r"von:\s.+\n\s*(?:gesendet|datum|an|betreff):.*",
    r"da:\s.+\n\s*(?:inviato|data|a|oggetto):.*",
)
# Greetings and sign-offs a one-line summary skips.
GREETINGS = (
    r"(?:hi|hello|hey|dear|good\s+(?:morning|afternoon|evening)|hola|buenos\s+dias|"
    r"buenas(?:\s+tardes)?|estimad[oa]s?|bonjour|bonsoir|madame|monsieur|salut|hallo|"
    r"guten\s+(?:tag|morgen|abend)|sehr\s+geehrte|liebe[sr]?|ola|oi|bom\s+dia|boa\s+tarde|"
    r"prezad[oa]s?|caro|cara|cari|ciao|buongiorno|buonasera|salve|gentile)\b[^.!?\n]{0,40}"
)

# --- lateness said by two dates or days ("due on the 3rd, got here on the 11th") ---------------
# What the customer was told to expect, then what happened; the reader compares the days.
EXPECTED = (
    r"due|expected|expect|promised|scheduled|estimated(?:\s+(?:arrival|delivery))?|"
    r"(?:meant|supposed)\s+to\s+(?:arrive|come|be\s+(?:here|delivered))|"
    r"should\s+have\s+(?:been\s+here|arrived|come|been\s+delivered)|"
    r"(?:would|it'?d)\s+(?:be\s+(?:with\s+me|here|delivered)|arrive|come)|delivery\s+date|"
    r"tenia\s+que\s+llegar|debia\s+(?:de\s+)?llegar|deberia\s+(?:haber\s+)?llegar|"
    r"previst[oa]s?|prometi\w*|estaria|fecha\s+(?:prevista|estimada|de\s+entrega)|"
    r"iba\s+a\s+llegar|devait\s+(?:arriver|etre\s+livree?)|prevue?s?|censee?\s+arriver|"
    r"promise?|annoncee?|date\s+de\s+livraison|sollte|angekundigt|voraussichtlich|"
    r"versprochen|geplant|liefertermin|zugesagt|era\s+para\s+chegar|devia\s+chegar|"
    r"deveria\s+(?:ter\s+)?chegar|prometid[oa]|prazo|doveva\s+arrivare|promess[oa]|"
    r"sarebbe\s+dovut[oa]\s+arrivare|data\s+di\s+consegna"
)
ARRIVED = (
    r"got\s+here|arrived|arrival|came|turned\s+up|showed\s+up|delivered|reached\s+me|"
    r"brought\s+it|dropped\s+off|received|landed|llego|recibi|entregaron|entregado|vino|"
    r"arrivee?|recue?|livree?|angekommen|gekommen|kam|zugestellt|geliefert|erhalten|"
    r"eingetroffen|chegou|entregue|recebi|veio|arrivat[oa]|consegnat[oa]|ricevut[oa]"
)
WEEKDAYS = (
    ("monday", "lunes", "lundi", "montag", "segunda", "lunedi"),
    ("tuesday", "martes", "mardi", "dienstag", "terca", "martedi"),
    ("wednesday", "miercoles", "mercredi", "mittwoch", "quarta", "mercoledi"),
    ("thursday", "jueves", "jeudi", "donnerstag", "quinta", "giovedi"),
    ("friday", "viernes", "vendredi", "freitag", "sexta", "venerdi"),
    ("saturday", "sabado", "samedi", "samstag", "sonnabend", "sabato"),
    ("sunday", "domingo", "dimanche", "sonntag", "domenica"),
)
# "the following Monday", "Tuesday of the next week": a weekday in a later week.
NEXT_WEEK = (
    r"following|next|siguiente|proxim[oa]|suivante?|prochaine?|nachsten|folgenden|seguinte|"
    r"successiv[oa]|dopo"
)

# --- order numbers said in words ("one oh five two", "uno cero cinco dos") --------------------
DIGIT_WORDS: dict[str, str] = {
    **dict.fromkeys(("zero", "oh", "cero", "null"), "0"),
    **dict.fromkeys(("one", "uno", "un", "une", "eins", "um", "uma"), "1"),
    **dict.fromkeys(("two", "dos", "deux", "zwei", "zwo", "dois", "duas", "due"), "2"),
    **dict.fromkeys(("three", "tres", "trois", "drei", "tre"), "3"),
    **dict.fromkeys(("four", "cuatro", "quatre", "vier", "quatro", "quattro"), "4"),
    **dict.fromkeys(("five", "cinco", "cinq", "funf", "fuenf", "cinque"), "5"),
    **dict.fromkeys(("six", "seis", "sechs", "sei"), "6"),
    **dict.fromkeys(("seven", "siete", "sept", "sieben", "sete", "sette"), "7"),
    **dict.fromkeys(("eight", "ocho", "huit", "acht", "oito", "otto"), "8"),
    **dict.fromkeys(("nine", "nueve", "neuf", "neun", "nove"), "9"),
}
