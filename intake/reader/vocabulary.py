"""The rules reader's vocabulary: what customers write, in six languages (en, es, fr, de, pt, it).

Every entry is written without accents and in lower case: the reader compares against the
message folded the same way (intake/reader/text.py), so "reçu", "recu" and "REÇU" are one word.
A phrase is a regular expression over that folded text, matched on word boundaries."""

from __future__ import annotations

from refunds import policy

# --- the words that introduce an order number --------------------------------------------------
# "order 1042", "order no. 1042", "pedido 1042", "commande n° 1042", "Bestellung 1042",
# "encomenda 1042", "ordine 1042", and their plurals and "number of the order" forms.
ORDER_WORDS = (
    r"orders?",
    r"order\s+(?:number|no|nr|num|id|ref(?:erence)?)s?",
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

# --- why the customer writes ----------------------------------------------------------------
# Checked in this order; the first group with a hit wins. A wrong or damaged item is named
# even when it also came late ("arrived late and broken" is a broken item: a manager looks).
# Phrases marked negatable are skipped after "not", "wasn't", "no", "pas", "nicht", "non", "nao".
REASON_PHRASES: list[tuple[str, tuple[str, ...]]] = [
    (
        policy.WRONG_ITEM,
        (
            # en
            r"wrong\s+(?:\w+\s+){0,2}?(?:item|items|size|colou?r|product|one|thing|things|book|"
            r"model|version|shoes?|shirt|parcel|package|order|article|style|flavou?r|part)",
            r"(?:sent|shipped|delivered|gave|received|got)\s+(?:me\s+)?(?:the\s+|a\s+)?wrong",
            r"not\s+what\s+i\s+(?:ordered|bought|paid\s+for)",
            r"(?:isn'?t|is\s+not|wasn'?t|was\s+not)\s+(?:the\s+)?(?:one|item|thing)\s+i\s+ordered",
            r"(?:incorrect|different)\s+(?:item|product|size|colou?r|model)",
            r"instead\s+of\s+(?:the|a|my|mine)\b",
            r"(?:someone|somebody)\s+else'?s\s+(?:order|parcel|package|item|stuff|things)|"
            r"(?:meant|addressed)\s+for\s+(?:someone|somebody)\s+else",
            r"(?:pedido|paquete)\s+de\s+otra\s+persona|en\s+(?:lugar|vez)\s+del?\s+mio",
            r"(?:commande|colis)\s+de\s+quelqu'?\s*un\s+d'?\s*autre|"
            r"au\s+lieu\s+d[eu]\s+(?:la\s+)?mien(?:ne)?",
            r"(?:bestellung|paket|sendung)\s+(?:von\s+)?(?:jemand(?:em)?|einem)\s+anderen|"
            r"(?:an)?statt\s+(?:der\s+|dem\s+)?meine[nrs]?\b",
            r"(?:encomenda|pacote)\s+de\s+outra\s+pessoa|em\s+vez\s+d[ao]\s+(?:meu|minha)\b",
            r"(?:ordine|pacco)\s+di\s+(?:un'?\s*)?altr[oa]\s+(?:persona|cliente)|"
            r"invece\s+del(?:la)?\s+mi[oa]\b",
            # es
            r"(?:articulo|producto|talla|color|modelo|paquete)\s+(?:equivocad[oa]|incorrect[oa]|"
            r"errone[oa])",
            r"equivocad[oa]s?",
            r"no\s+es\s+(?:lo\s+que|el\s+que|la\s+que)\s+(?:yo\s+)?(?:pedi|compre|encargue)",
            r"me\s+(?:enviaron|mandaron|llego)\s+(?:otro|otra|uno\s+distinto)",
            # fr
            r"mauvais(?:e)?\s+(?:article|taille|couleur|produit|modele|colis|commande)",
            r"pas\s+(?:ce\s+que|celui\s+que|celle\s+que)\s+j'?\s*ai\s+commande",
            r"pas\s+le\s+bon\s+(?:article|produit|modele)|pas\s+la\s+bonne\s+(?:taille|couleur)",
            r"article\s+errone",
            # de
            r"falsche[nrs]?\s+(?:artikel|grosse|farbe|produkt|modell|ware|paket|teil)",
            r"falsch(?:e|es)?\s+(?:geliefert|geschickt|verschickt|bekommen|erhalten)",
            r"nicht\s+(?:das|den|die)(?:,)?\s+(?:was|den|die)\s+ich\s+bestellt",
            # pt
            r"(?:item|produto|tamanho|cor|artigo|modelo)\s+errad[oa]",
            r"(?:veio|chegou|enviaram|mandaram)\s+(?:o\s+|a\s+)?(?:produto\s+|item\s+)?errad[oa]",
            r"nao\s+e\s+o\s+que\s+(?:eu\s+)?(?:encomendei|pedi|comprei)",
            # it
            r"(?:articolo|prodotto|taglia|colore|modello|pacco)\s+sbagliat[oa]",
            r"non\s+e\s+quello\s+che\s+ho\s+(?:ordinato|comprato)",
            r"(?:mandato|spedito|inviato|arrivato)\s+(?:un\s+|il\s+)?(?:articolo\s+)?sbagliat[oa]",
        ),
    ),
    (
        policy.DAMAGED,
        (
            # en
            r"damaged?|damge?d|dammaged|damadged",
            r"broken|broke|brokn|borken|smashed|cracked|crushed|dented|shattered|shatterd|"
            r"torn|ripped|leaking|leaked|leaky|scratched|defective|faulty|spoiled|spoilt|"
            r"mouldy|moldy|squashed|bent|snapped",
            r"(?:doesn'?t|does\s+not|don'?t|won'?t|will\s+not|didn'?t)\s+(?:even\s+)?"
            r"(?:work|turn\s+on|switch\s+on|charge|power\s+on)",
            r"stopped\s+working|in\s+pieces|dead\s+on\s+arrival|\bdoa\b",
            # es
            r"danad[oa]s?|rot[oa]s?|estropead[oa]s?|golpead[oa]s?|defectuos[oa]s?|"
            r"quebrad[oa]s?|rajad[oa]s?|averiad[oa]s?",
            r"no\s+funciona|no\s+enciende|dejo\s+de\s+funcionar",
            # fr
            r"endommagee?s?|cassee?s?|abimee?s?|brisee?s?|defectueu(?:x|se)|fissuree?s?|"
            r"ecrasee?s?|dechiree?s?",
            r"ne\s+(?:fonctionne|marche|s'?allume)\s+pas|en\s+morceaux",
            # de
            r"beschadigt|kaputt|zerbrochen|defekt|zerkratzt|zerdruckt|gebrochen|eingedruckt|"
            r"beschaedigt",
            r"funktioniert\s+nicht|geht\s+nicht\s+an",
            # pt
            r"danificad[oa]s?|partid[oa]s?|estragad[oa]s?|avariad[oa]s?|defeituos[oa]s?|"
            r"amassad[oa]s?|rachad[oa]s?",
            r"nao\s+funciona|nao\s+liga",
            # it
            r"danneggiat[oaie]|rott[oaie]|difettos[oaie]|ammaccat[oaie]|graffiat[oaie]|"
            r"rovinat[oaie]|crepat[oaie]",
            r"non\s+funziona|non\s+si\s+accende",
        ),
    ),
    (
        # Came, but late: read before "not received", so "it did not arrive on time" and "it
        # finally arrived, two weeks late" are late deliveries.
        policy.LATE_DELIVERY,
        (
            r"(?:not|n'?t|never)\s+(?:arrive|arrived|come|came|delivered|deliver|get\s+here)\s+"
            r"(?:on\s+time|in\s+time)",
            r"(?:finally|eventually|only)\s+(?:\w+\s+)?(?:arrived|came|got\s+here|delivered|"
            r"received|turned\s+up|showed\s+up)",
            r"(?:arrived|came|delivered|received|got\s+it)\s+(?:\w+\s+){0,4}?late",
            r"llego\s+(?:\w+\s+){0,3}?(?:tarde|con\s+retraso)|por\s+fin\s+llego",
            r"(?:arrivee?|livree?|recu)\s+(?:\w+\s+){0,3}?(?:en\s+retard|tard)",
            r"(?:endlich|erst)\s+(?:\w+\s+){0,3}?(?:angekommen|geliefert|erhalten)",
            r"chegou\s+(?:\w+\s+){0,3}?(?:atrasad[oa]|tarde|com\s+atraso)|finalmente\s+chegou",
            r"arrivat[oa]\s+(?:\w+\s+){0,3}?(?:in\s+ritardo|tardi)|finalmente\s+arrivat[oa]",
        ),
    ),
    (
        policy.NOT_RECEIVED,
        (
            # en
            r"(?:never|not|n'?t)\s+(?:yet\s+)?(?:been\s+)?(?:arrived?|arived|recei?ved|recieved|"
            r"recived|delivered|come|came|shown\s+up|showed\s+up|turned\s+up)",
            r"(?:haven'?t|have\s+not|hasn'?t|has\s+not|didn'?t|did\s+not|never)\s+(?:yet\s+)?"
            r"(?:got(?:ten)?|get|receive|recei?ved|recieved|recived|arrive|arrived|come|seen|show)",
            r"still\s+(?:waiting|not\s+here|nothing|no\s+sign|hasn'?t|haven'?t|not\s+arrived|"
            r"not\s+received)",
            r"(?:lost|missing|stolen)\s+(?:in\s+(?:the\s+)?(?:post|mail|transit)|parcel|package|"
            r"order|delivery|shipment)",
            r"(?:parcel|package|order|delivery|shipment)\s+(?:is\s+|was\s+|got\s+)?"
            r"(?:lost|missing|stolen)",
            r"(?:marked|shows?|showing|says?|said|claims?|claimed|states?|lists?|according\s+to)"
            r"\s+(?:[\w']+\s+){0,4}?(?:as\s+)?delivered\W+(?:but|yet|though|although)",
            # A delivery that failed or went back, in the courier's words (often forwarded).
            r"unable\s+to\s+deliver|(?:could\s+not|couldn'?t|cannot|can'?t)\s+(?:be\s+)?"
            r"deliver(?:ed)?|delivery\s+(?:attempt\s+)?(?:failed|unsuccessful)|failed\s+delivery|"
            r"return(?:ed)?\s+to\s+(?:the\s+)?sender",
            r"where\s+is\s+my\s+(?:order|package|parcel|stuff|delivery)|"
            r"donde\s+esta\s+(?:mi|el)\s+(?:pedido|paquete|envio)|"
            r"ou\s+(?:est|en\s+est)\s+(?:mon\s+colis|ma\s+commande|ma\s+livraison)|"
            r"wo\s+(?:ist|bleibt)\s+(?:mein\s+paket|meine\s+(?:bestellung|lieferung|sendung))|"
            r"onde\s+esta\s+(?:a\s+)?(?:minha\s+encomenda|o\s+meu\s+(?:pacote|pedido))|"
            r"dov'?\s*e\s+(?:il\s+)?(?:mio\s+(?:pacco|ordine)|la\s+mia\s+spedizione)",
            r"nothing\s+(?:has\s+)?(?:arrived|came|come)|no\s+(?:sign\s+of\s+(?:it|the|my)|"
            r"package|parcel)",
            # A part of the order missing from what came ("the charger was missing"), or a box
            # that came empty: not received too, of that part or of the whole order.
            r"(?<!nothing\s)(?:is|was|were|are)\s+missing|missing\s+from\s+(?:the\s+|my\s+)?(?:box|parcel|"
            r"package|order|delivery)|(?:was|were|is|are)(?:\s+not|n'?t)\s+in\s+(?:the\s+|my\s+)?"
            r"(?:box|parcel|package)|(?:came|arrived)\s+without\s+(?:the|its|a|an|my)\b",
            r"(?:box|parcel|package|carton)\s+(?:was|is|came|arrived)\s+(?:completely\s+|totally\s+)?"
            r"empty|empty\s+(?:box|parcel|package|carton)|nothing\s+(?:was\s+)?(?:in|inside)\s+"
            r"(?:it|the\s+(?:box|parcel|package))",
            # es
            r"no\s+(?:me\s+)?(?:ha|han)\s+llegado|no\s+(?:me\s+)?llego|nunca\s+(?:me\s+)?llego|"
            r"todavia\s+no\s+(?:ha\s+)?llega|aun\s+no\s+(?:ha\s+)?llega|aun\s+no\s+recib",
            r"no\s+(?:lo\s+|la\s+|los\s+)?(?:he\s+)?recibid[oa]|no\s+(?:lo\s+|la\s+)?recibi|"
            r"nunca\s+(?:lo\s+|la\s+)?recibi|sigo\s+esperando|perdid[oa]\s+en|extraviad[oa]",
            r"falta(?:ba|n|ban)?\s+(?:el|la|los|las|un|una)\b|(?:vino|llego)\s+sin\s+"
            r"(?:el|la|los|las)\b",
            r"(?:caja|paquete)\s+(?:\w+\s+){0,2}?vaci[oa]|(?:vino|llego)\s+vaci[oa]",
            r"(?:dice|figura|aparece|consta|marca)\s+(?:\w+\s+){0,4}?(?:como\s+)?entregad[oa]\W+"
            r"(?:pero|aunque)|no\s+(?:pudimos|pudieron|se\s+pudo|fue\s+posible)\s+entregar|"
            r"devuelt[oa]\s+al\s+remitente|entrega\s+fallida",
            # fr
            r"jamais\s+(?:ete\s+)?(?:recue?s?|arrivee?s?|livree?s?)|pas\s+(?:encore\s+)?(?:ete\s+)?"
            r"(?:recue?s?|arrivee?s?|livree?s?)|toujours\s+pas\s+(?:recue?s?|arrivee?s?|livree?s?|de\s+colis)|"
            r"j'?\s*attends\s+toujours|colis\s+perdu|jamais\s+arrivee?",
            r"(?:il\s+)?manqu(?:e|ait|aient|ent)\s+(?:le|la|les|l'|un|une)|(?:arrivee?|livree?|"
            r"recue?)\s+sans\s+(?:le|la|les|l'|son|sa|ses)",
            r"(?:colis|carton|boite)\s+(?:\w+\s+){0,2}?vide",
            r"(?:indique|affiche|dit|marque|pretend)\s+(?:\w+\s+){0,4}?(?:comme\s+)?livree?\W+"
            r"(?:mais|pourtant|alors\s+que)|(?:n'a\s+pas\s+pu|impossible\s+de)\s+(?:etre\s+)?livr|"
            r"retourne\s+a\s+l'?\s*expediteur|echec\s+de\s+(?:la\s+)?livraison",
            # de
            r"(?:nicht|nie|noch\s+nicht)\s+(?:angekommen|erhalten|geliefert|zugestellt|bekommen|"
            r"eingetroffen|da)|warte\s+(?:immer\s+)?noch|(?:paket|sendung)\s+(?:ist\s+)?"
            r"verloren|verloren\s+gegangen",
            r"fehl(?:t|te|ten)\b(?!\s+nichts)|ohne\s+(?:das|den|die)\s+\w+\s+(?:angekommen|geliefert)",
            r"(?:paket|karton|schachtel|box)\s+(?:\w+\s+){0,2}?leer|leere[ns]?\s+(?:paket|karton|"
            r"schachtel|box)",
            r"(?:als\s+)?(?:zugestellt|geliefert)\s+(?:markiert|angezeigt|gemeldet|gilt)?\W*"
            r"(?:aber|obwohl|doch)|angeblich\s+(?:zugestellt|geliefert)|konnte\s+nicht\s+"
            r"zugestellt|zustellung\s+(?:ist\s+)?fehlgeschlagen|(?:zuruck|retour)\s+an\s+"
            r"(?:den\s+)?absender",
            # pt
            r"(?:nao|nunca|ainda\s+nao)\s+(?:me\s+)?(?:chegou|chegaram|recebi|foi\s+entregue|"
            r"veio)|continuo\s+a?\s*esperar|extraviad[oa]",
            r"falta(?:va|m|vam)?\s+(?:o|a|os|as|um|uma)\b|(?:veio|chegou)\s+sem\s+(?:o|a|os|as)\b",
            r"(?:caixa|pacote|encomenda)\s+(?:\w+\s+){0,2}?vazi[oa]|(?:veio|chegou)\s+vazi[oa]",
            r"(?:diz|consta|aparece|indica)\s+(?:\w+\s+){0,4}?(?:como\s+)?entregue\W+"
            r"(?:mas|porem)|nao\s+(?:foi\s+possivel|conseguimos|conseguiram)\s+entregar|"
            r"devolvid[oa]\s+ao\s+remetente",
            # it
            r"(?:non|mai|ancora\s+non)\s+(?:mi\s+)?(?:e\s+|sono\s+)?(?:(?:mai|ancora)\s+)?"
            r"(?:arrivat[oaie]|ricevut[oaie]|consegnat[oaie])|non\s+ho\s+(?:mai\s+|ancora\s+)?"
            r"ricevuto|mai\s+arrivat[oaie]|sto\s+ancora\s+aspettando|smarrit[oaie]",
            r"manca(?:va|no|vano)?\s+(?:il|lo|la|l'|i|gli|le|un|una|uno)\b|(?:arrivat[oaie]|consegnat[oaie])\s+senza\s+(?:il|lo|la|l'|i|"
            r"gli|le)\b",
            r"(?:pacco|scatola|confezione)\s+(?:\w+\s+){0,2}?vuot[oa]|arrivat[oa]\s+vuot[oa]",
            r"(?:risulta|dice|segna|indica)\s+(?:\w+\s+){0,4}?(?:come\s+)?consegnat[oa]\W+"
            r"(?:ma|pero)|non\s+(?:e\s+stato\s+possibile|siamo\s+riusciti\s+a)\s+consegnar|"
            r"restituit[oa]\s+al\s+mittente|consegna\s+fallita",
        ),
    ),
    (
        policy.LATE_DELIVERY,
        (
            # en
            r"late|lateness|belated|latee",
            r"delay|delays|delayed|dealyed|delaied|deleyed",
            r"took\s+(?:a|one|two|three|four|five|\d+)\s+(?:\w+\s+)?(?:days?|weeks?)|"
            r"took\s+(?:ages|forever|so\s+long|too\s+long|far\s+too\s+long)",
            r"(?:days?|weeks?)\s+(?:after|past|behind)\s+(?:the\s+)?(?:promised|expected|"
            r"estimated|delivery|due)",
            r"after\s+the\s+(?:promised|expected|estimated|guaranteed)\s+(?:date|day|delivery)",
            r"overdue|behind\s+schedule|too\s+slow|so\s+slow|slow\s+delivery|missed\s+the\s+"
            r"(?:delivery\s+)?(?:date|deadline)",
            r"later\s+than\s+(?:[\w']+\s+){0,2}?(?:promised|expected|planned|scheduled|estimated|"
            r"said|stated|quoted|advertised|told|agreed|indicated)|"
            r"(?:delivery|shipping|shipment|postage|courier|dispatch|post)\s+(?:[\w']+\s+){0,3}?"
            r"slow|slow\s+(?:shipping|shipment|post|courier)",
            r"mas\s+tarde\s+de\s+lo\s+(?:prometido|previsto|esperado|indicado|acordado|"
            r"anunciado)|(?:envio|entrega)\s+(?:\w+\s+){0,2}?(?:muy\s+|demasiado\s+)?lent(?:[oa]|isim[oa])",
            r"plus\s+tard\s+que\s+(?:\w+\s+)?(?:prevu|promis|annonce|indique)|"
            r"(?:livraison|envoi|expedition)\s+(?:\w+\s+){0,2}?(?:tres\s+|trop\s+|super\s+)?lente?",
            r"spater\s+als\s+(?:\w+\s+){0,2}?(?:versprochen|angekundigt|geplant|erwartet|"
            r"angegeben|vereinbart)|(?:lieferung|versand|zustellung)\s+(?:\w+\s+){0,2}?"
            r"(?:sehr\s+|zu\s+|extrem\s+)?langsam",
            r"mais\s+tarde\s+do\s+que\s+(?:o\s+)?(?:prometido|previsto|esperado|indicado)|"
            r"(?:entrega|envio)\s+(?:\w+\s+){0,2}?(?:muito\s+|demasiado\s+)?lent(?:[oa]|issim[oa])",
            r"piu\s+tardi\s+(?:del|di\s+quanto)\s+(?:\w+\s+)?(?:previsto|promesso|indicato|"
            r"atteso|detto)|(?:consegna|spedizione)\s+(?:\w+\s+){0,2}?(?:molto\s+|troppo\s+)?"
            r"lent(?:[oa]|issim[oa])",
            # es
            r"retraso|retrasad[oa]s?|con\s+demora|demorad[oa]|llego\s+tarde|llegaron\s+tarde|"
            r"muy\s+tarde|tarde\s+(?:el|la|mi)\s+(?:pedido|paquete|entrega)",
            # fr
            r"en\s+retard|retard|retards|tardivement|arrivee?\s+(?:trop\s+)?tard|"
            r"livree?\s+(?:trop\s+)?tard|avec\s+\d+\s+jours\s+de\s+retard",
            # de
            r"verspatet|verspatung|verspaetet|verspaetung|zu\s+spat|zu\s+spaet|verzogert|"
            r"verzogerung|spat\s+(?:angekommen|geliefert)",
            # pt
            r"atrasad[oa]s?|atraso|com\s+atraso|chegou\s+tarde|entrega\s+tardia",
            # it
            r"in\s+ritardo|ritardo|ritardi|arrivat[oa]\s+tardi|consegna\s+tardiva|troppo\s+tardi",
        ),
    ),
]
# A hit right after one of these is no hit: "it wasn't late", "not damaged, just late".
NEGATIONS = (
    r"not|n'?t|never|no|wasn'?t|isn'?t|without|pas|nicht|kein|keine|non|nao|ni|sin|sans|ohne|"
    r"senza|sem"
)
NEGATABLE = {policy.LATE_DELIVERY, policy.DAMAGED, policy.WRONG_ITEM}

# Asking for money back without one of the reasons above: "another request".
REFUND_PHRASES = (
    r"refund|refunds|refunded|refunding|refnd|refund?d|refound|rufund|reufnd|refudn|"
    r"money\s+back|reimburs\w*|compensat\w*|charge\s*back|chargeback|credit\s+(?:me|back|it)|"
    r"(?:cancel|cancelled|canceled|cancellation)\b|"
    r"(?:return|send\s+back)\s+(?:it|this|them|the|my)|overcharged|double\s+charged|"
    r"charged\s+(?:me\s+)?(?:twice|two\s+times|double)|"
    r"(?:delivery|shipping|postage)\s+(?:fee|charge|cost)s?\s+back",
    r"reembols\w*|devolu(?:cion|cao)|devolver\s+(?:el|o)\s+dinheiro|devolver\s+el\s+dinero|"
    r"devuelvan|reintegro|estorno|cancelar",
    r"rembours\w*|annuler|annulation",
    r"erstatt\w*|ruckerstatt\w*|rueckerstatt\w*|geld\s+zuruck|geld\s+zurueck|gutschrift|"
    r"stornier\w*",
    r"rimbors\w*|restituzione|annullare",
)
# Said when a refund is already done: thanks, not a request ("I got my refund, thank you").
REFUND_DONE_PHRASES = (
    r"(?:got|received|recieved|saw|see)\s+(?:the|my|your)\s+refund|refund\s+(?:has\s+)?"
    r"(?:arrived|came\s+through|went\s+through|showed\s+up|is\s+in)|thanks?\s+(?:you\s+)?"
    r"for\s+(?:the|my)\s+(?:quick\s+|fast\s+)?refund|recib\w*\s+(?:el\s+)?reembolso|"
    r"recu\s+(?:le\s+|mon\s+)?remboursement|erstattung\s+(?:ist\s+)?(?:angekommen|erhalten)|"
    r"recebi\s+o\s+reembolso|ricevuto\s+il\s+rimborso|gracias\s+por\s+el\s+reembolso|"
    r"merci\s+(?:\w+\s+)?pour\s+(?:le|votre)\s+(?:\w+\s+)?remboursement|"
    r"danke\s+(?:\w+\s+)?fur\s+die\s+(?:\w+\s+)?(?:erstattung|ruckerstattung)|"
    r"obrigad[oa]\s+pelo\s+(?:\w+\s+)?reembolso|grazie\s+per\s+il\s+(?:\w+\s+)?rimborso"
)

# --- the customer's language, by its commonest small words ----------------------------------
STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        "the and is it my was i you to of for in on have has not but this that with "
        "please thanks thank hi hello me we our your can would could just got still".split()
    ),
    "es": frozenset(
        "el la los las y es mi mis pero que por para con una un del al lo hola gracias "
        "no me ha he llego todavia pedido muy usted ustedes esta estoy quiero".split()
    ),
    "fr": frozenset(
        "le la les et est mon ma mes mais que pour avec une un du au je vous bonjour merci "
        "pas ne j'ai ai commande tres c'est il elle toujours".split()
    ),
    "de": frozenset(
        "der die das und ist mein meine aber dass fur mit ein eine ich sie hallo danke "
        "nicht noch bestellung bitte sehr wurde habe es ist war".split()
    ),
    "pt": frozenset(
        "o os as e meu minha mas que para com uma um do da ao eu voce ola obrigado obrigada "
        "nao chegou encomenda muito isso esta estou ainda".split()
    ),
    "it": frozenset(
        "il lo gli e mio mia ma che per con una un del della al io ciao grazie "
        "non ho ordine molto sono questo arrivato ancora".split()
    ),
}

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

# --- "where is my refund": a refund already asked for, asked after --------------------------
REFUND_STATUS_PHRASES = (
    r"where\s+(?:is|'s)\s+(?:my|the)\s+(?:\w+\s+)?refund|"
    r"(?:status|news|update)\s+(?:of|on|about)\s+(?:my|the)\s+(?:\w+\s+)?refund|"
    r"refund\s+status|(?:haven'?t|have\s+not|didn'?t|did\s+not|not|never|still\s+not)\s+"
    r"(?:yet\s+)?(?:got(?:ten)?|received?|seen)\s+(?:my|the|any)\s+(?:\w+\s+)?refund|"
    r"when\s+(?:will|do|can)\s+i\s+(?:get|receive|see)\s+(?:my|the)\s+(?:\w+\s+)?refund|"
    r"refund\s+(?:has\s+)?(?:still\s+)?(?:not|n'?t|never)\s+(?:\w+\s+)?(?:arrived|come|"
    r"shown\s+up|reached)|"
    r"donde\s+esta\s+(?:mi|el)\s+reembolso|estado\s+de\s+(?:mi|el)\s+reembolso|"
    r"(?:todavia|aun)\s+no\s+(?:he\s+)?recib\w*\s+(?:mi|el)\s+reembolso|"
    r"no\s+(?:he\s+)?recibido\s+(?:mi|el)\s+reembolso|"
    r"ou\s+en\s+est\s+(?:mon|le)\s+remboursement|"
    r"(?:pas\s+(?:encore\s+)?|toujours\s+pas\s+)recu\s+(?:mon|le)\s+remboursement|"
    r"wo\s+bleibt\s+(?:meine|die)\s+(?:ruck)?erstattung|"
    r"(?:ruck)?erstattung\s+(?:\w+\s+){0,2}(?:noch\s+)?nicht\s+(?:erhalten|angekommen|bekommen)|"
    r"(?:cade|onde\s+esta)\s+(?:o\s+)?(?:meu|o)\s+reembolso|"
    r"(?:ainda\s+)?nao\s+recebi\s+o\s+(?:meu\s+)?reembolso|"
    r"dov'?\s*e\s+(?:il\s+)?(?:mio|il)\s+rimborso|"
    r"non\s+ho\s+(?:ancora\s+)?ricevuto\s+il\s+(?:mio\s+)?rimborso"
)

# The money asked back, as customers name it when they ask after it: "the refund", "my money
# back", "the credit", "el reembolso", "la devolución del dinero", "die Gutschrift", "il rimborso".
REFUND_NOUNS = (
    r"refund\w*|reimburs\w*|money(?:\s+back)?|credit(?!\s+card)|(?:\$|£|€)\s?\d[\d.,]{0,15}\d|"
    r"reembols\w*|devol(?:ucion|ver\w*|vieran|vi\w*)|dinero|"
    r"rembours\w*|argent|"
    r"(?:ruck)?erstatt\w*|gutschrift|geld|betrag|"
    r"dinheiro|estorno|"
    r"rimbors\w*|soldi|accredito|(?<![\d.,])\d[\d.,]{0,15}\s?(?:€|eur|euros?|dollars?)"
)
# Asking how a refund stands ("any update on", "where is", "¿cómo va", "où en est", "wo bleibt",
# "alguma novidade sobre", "a che punto è"), before the money's name.
REFUND_PROGRESS = (
    r"where(?:\s+is|'s)|status\s+(?:of|on)|(?:any\s+)?(?:update|news)\s+(?:on|about|regarding)|"
    r"any\s+(?:update|news)|how(?:\s+is|'s)|what(?:\s+has)?\s+happened\s+(?:to|with)|"
    r"checking\s+(?:in\s+)?on|follow(?:ing)?(?:\s+|-)up\s+on|chasing|"
    r"se\s+ha\s+procesado|ha\s+sido\s+procesad[oa]|donde\s+esta|como\s+va|que\s+(?:pasa|paso)\s+con|estado\s+de|novedades?\s+(?:sobre|de|del)|"
    r"ou\s+en\s+est|qu'en\s+est-il\s+de|des\s+nouvelles\s+(?:de|du)|ou\s+est|"
    r"wo\s+bleibt|wo\s+ist|was\s+ist\s+mit|stand\s+(?:der|meiner)|neuigkeiten\s+(?:zu|zur|uber)|"
    r"onde\s+esta|cade|(?:alguma\s+)?novidades?\s+(?:sobre|do|da)|ponto\s+de\s+situacao|"
    r"estado\s+do|a\s+che\s+punto|novita\s+(?:sul|sulla|per)|notizie\s+(?:sul|del)|"
    r"che\s+fine\s+ha\s+fatto|dov'?\s*e|stato\s+del"
)
# Waiting for it, or not seeing it yet, before the money's name: "still waiting for", "haven't
# seen", "sigo esperando", "j'attends toujours", "warte noch immer auf", "sto ancora aspettando".
REFUND_WAITING = (
    r"(?:still\s+)?waiting\s+(?:for|on)|still\s+expecting|"
    r"(?:haven'?t|have\s+not|hasn'?t|didn'?t|did\s+not|not|never|still\s+(?:don'?t|can'?t|"
    r"haven'?t))\s+(?:yet\s+)?(?:got(?:ten)?|received?|seen|see|had)|"
    r"sigo\s+(?:esperando|sin\s+(?:recibir|ver))|estoy\s+esperando|"
    r"(?:todavia|aun)\s+no\s+(?:he\s+|me\s+ha\s+)?(?:recibido|visto|llegado|veo|tengo)|"
    r"no\s+(?:he\s+)?(?:recibido|visto)|"
    r"j'?\s*attends(?:\s+toujours|\s+encore)?|en\s+attente\s+d[eu']|"
    r"(?:pas\s+encore|toujours\s+pas|jamais)\s+(?:vu|recu|eu)|"
    r"warte\s+(?:noch\s+)?(?:immer\s+)?(?:noch\s+)?auf|noch\s+(?:nicht|keine?n?)\s+(?:\w+\s+)?"
    r"(?:erhalten|bekommen|gesehen)|"
    r"(?:ainda\s+)?(?:estou|continuo)\s+(?:a\s+espera|a\s+esperar|esperando|aguardando)|"
    r"(?:ainda\s+)?nao\s+(?:recebi|vi)|aguardo|"
    r"sto\s+(?:ancora\s+)?aspettando|aspetto\s+ancora|in\s+attesa\s+del|"
    r"non\s+ho\s+(?:ancora\s+)?(?:ricevuto|visto)"
)
# After the money's name: it has not come, or where it stands ("the refund still hasn't
# arrived", "has my refund been processed", "la Gutschrift ist nicht eingegangen").
REFUND_NOT_COME = (
    r"(?:(?:has|have|is|was|still)\s*){0,2}(?:not|n't|never|yet\s+to)\s+(?:yet\s+)?(?:be(?:en)?\s+)?"
    r"(?:arrived?|come|shown\s+up|show\s+up|reached|appeared|credited|processed|on\s+my)|"
    r"(?:been|be)\s+(?:processed|issued|sent|paid)|go(?:ne)?\s+through|on\s+(?:its|the)\s+way|"
    r"no\s+(?:me\s+)?(?:ha\s+)?(?:llegado|aparece|llega)|"
    r"(?:n'est|n'a)\s+(?:toujours\s+)?pas\s+(?:encore\s+)?(?:ete\s+)?(?:arrive|apparu|"
    r"credite|effectue)|"
    r"(?:noch\s+)?nicht\s+(?:\w+\s+){0,3}?(?:eingegangen|angekommen|erhalten|gutgeschrieben|"
    r"da|bearbeitet)|"
    r"(?:ainda\s+)?nao\s+(?:me\s+)?(?:chegou|apareceu|caiu|entrou)|"
    r"non\s+(?:e\s+)?(?:ancora\s+)?(?:arrivat[oa]|accreditat[oa])"
)
# Asking when: "when will I get", "cuándo voy a recibir", "quand vais-je être", "wann bekomme
# ich", "quando vou receber", "quando riceverò"; the money's name follows.
REFUND_WHEN = (
    r"when\s+(?:will|do|can|should|am|would)\s+(?:i|we)\s+(?:\w+\s+)?(?:get|receive|see|expect|"
    r"be|have)|how\s+long\s+(?:will|does|until)|"
    r"cuando\s+(?:\w+\s+)?(?:voy\s+a\s+recibir|recibire|me\s+(?:devolveran|llegara)|llegara|"
    r"vere)|"
    r"quand\s+(?:est-ce\s+que\s+)?(?:je\s+vais|vais-je|vais\s+je|serai-je|vais\s+t-on)\s+"
    r"(?:\w+\s+)?(?:etre|recevoir|voir|avoir)|"
    r"wann\s+(?:bekomme|erhalte|kriege|sehe)\s+ich|wann\s+(?:wird|kommt)|"
    r"quando\s+(?:\w+\s+)?(?:vou\s+receber|recebo|vou\s+ter|chega|vai\s+chegar)|"
    r"quando\s+(?:\w+\s+)?(?:ricevero|arrivera|avro|vedro)"
)
# A refund said to be agreed before ("you said it would be refunded", "the refund you approved",
# "me confirmaron el reembolso", "zugesagte Gutschrift"), read with waiting words beside it.
REFUND_AGREED = (
    r"you\s+(?:said|told\s+me|promised|approved|confirmed|agreed|accepted)|(?:i\s+)?was\s+told|"
    r"(?:was|been|were)\s+(?:approved|confirmed|agreed|accepted|promised)|"
    r"i\s+(?:asked|requested)|requested|request|approved|confirmed|"
    r"me\s+(?:dijeron|dijisteis|prometieron|confirmaron|aseguraron)|confirmad[oa]|aprobad[oa]|"
    r"solicite|prometid[oa]|"
    r"on\s+m'a\s+(?:dit|promis|confirme)|vous\s+m'avez\s+(?:dit|promis|confirme)|promis|"
    r"confirme|valide|accepte|j'ai\s+demande|"
    r"zugesagte?n?|bestatigt|versprochen|genehmigt|beantragt|"
    r"(?:me\s+)?disseram|prometeram|aprovad[oa]|solicitei|"
    r"mi\s+(?:avete|avevate)\s+detto|promess[oa]|confermat[oa]|approvat[oa]|richiesto|"
    r"ho\s+chiesto"
)
# ... and the words that say it is still not there ("still", "nothing on my card", "todavía no",
# "toujours rien", "bis heute nicht", "ainda", "ancora nulla").
REFUND_PENDING = (
    r"still|yet|nothing|no\s+sign|it'?s\s+been|(?:not|isn'?t|n'?t)\s+(?:\w+\s+)?on\s+my\s+"
    r"(?:card|account|statement|bank)|"
    r"todavia|aun\s+no|sigo\s+sin|nada\s+en\s+mi|"
    r"toujours|pas\s+encore|rien|"
    r"noch\s+(?:nicht|immer|kein)|bis\s+heute|nichts|"
    r"ainda|ja\s+passaram|nada|"
    r"ancora|nulla|niente"
)
# Not a request though "refund" is said: the customer says none is needed, or asks how refunds
# work before buying.
NOT_ASKING_PHRASES = (
    r"no\s+(?:refund|reimbursement)\s+(?:is\s+)?(?:needed|necessary|required)|"
    r"(?:don'?t|do\s+not|won'?t|no\s+longer)\s+need\s+(?:a|the|any)\s+refund|"
    r"no\s+need\s+(?:for|of)\s+(?:a|the|any)\s+refund|not\s+(?:asking|looking)\s+for\s+(?:a|any)\s+"
    r"refund|(?:your|the)\s+(?:refund|returns?)\s+policy|how\s+(?:do|does)\s+(?:\w+\s+)?refunds?\s+"
    r"work|"
    r"(?:ya\s+)?no\s+(?:necesito|hace\s+falta)\s+(?:el|un|ningun)\s+reembolso|"
    r"politica\s+de\s+(?:reembolsos?|devoluciones?)|como\s+funcionan?\s+(?:los\s+)?reembolsos|"
    r"pas\s+besoin\s+(?:d'un|de|du)\s+remboursement|politique\s+de\s+remboursement|"
    r"(?:keine|brauche\s+keine)\s+(?:ruck)?erstattung\s+(?:notig|mehr)|erstattungsrichtlinie|"
    r"nao\s+(?:preciso|e\s+preciso)\s+(?:do|de|de\s+um)\s+reembolso|politica\s+de\s+reembolso|"
    r"non\s+(?:serve|ho\s+bisogno\s+di)\s+(?:il|un|alcun)\s+rimborso|politica\s+di\s+rimborso"
)
# A refund said to have come, with a few words between ("the refund for order 1084 came through
# yesterday", "il rimborso per l'ordine 4216 è arrivato ieri"): thanks, not a request. Read only
# after "where is my refund", so "the refund has not arrived" is never one.
REFUND_CAME = (
    r"arrived|came\s+(?:through|in)|went\s+through|showed\s+up|(?:is|was)\s+(?:in|on)\s+my|"
    r"(?:been\s+)?credited|hit\s+my|(?:ha\s+)?llegado|llego|(?:est|a\s+ete)\s+(?:bien\s+)?"
    r"(?:arrive|credite)|bien\s+recu|angekommen|eingegangen|gutgeschrieben|chegou|caiu|"
    r"(?:e\s+)?arrivat[oa]|accreditat[oa]"
)
# "got the refund", "ya me llegó el reembolso", "j'ai bien reçu le remboursement", "recebi o
# reembolso": the money's name after these, a few words later.
REFUND_GOT = (
    r"got|received|recieved|saw|see|(?:ya\s+)?me\s+(?:ha\s+)?(?:llego|llegado)|recibi\w*|"
    r"(?:j'?\s*ai\s+)?(?:bien\s+)?recu|(?:habe\s+)?(?:die\s+)?erhalten|recebi|ricevuto"
)
# Money not seen where it would land ("it still isn't on my card", "no veo nada en mi cuenta",
# "nicht auf meinem Konto", "sul conto non vedo nulla"): asked after, with the money named nearby.
REFUND_NOT_ON_ACCOUNT = (
    r"(?:not|isn'?t|n'?t|nothing|no|nada|rien|nicht|nichts|nao|non|nulla|niente)\s+"
    r"(?:[\w']+\s+){0,3}?(?:on|in|en|sur|auf|na|no|sul|nel)\s+(?:my|mi|mon|ma|meinem|meiner|"
    r"minha|meu|mio|il|la)\s+(?:card|account|statement|bank|tarjeta|cuenta|extracto|carte|"
    r"compte|releve|karte|konto|kontoauszug|cartao|conta|extrato|carta|conto|estratto)|"
    r"(?:sul|nel)\s+(?:mio\s+)?conto\s+non"
)
