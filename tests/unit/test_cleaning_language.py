"""Language identification: offline model, macrolanguage folding, confidence threshold, allow-list."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from document_batches import documents_batch

from platform_assets.cleaning.language_id import LanguageFilter, LanguageIdentifier
from platform_assets.cleaning.settings import LanguageSettings

SENTENCES = {
    "en": "The library opens at nine in the morning and closes late on Thursdays, "
    "when volunteers run reading groups for children.",
    "de": "Die Bibliothek öffnet um neun Uhr morgens und schließt donnerstags spät, "
    "wenn Freiwillige Lesegruppen für Kinder anbieten.",
    "fr": "La bibliothèque ouvre à neuf heures du matin et ferme tard le jeudi, "
    "quand des bénévoles animent des ateliers de lecture.",
    "es": "La biblioteca abre a las nueve de la mañana y cierra tarde los jueves, "
    "cuando los voluntarios organizan grupos de lectura.",
    "it": "La biblioteca apre alle nove del mattino e chiude tardi il giovedì, "
    "quando i volontari organizzano gruppi di lettura.",
    "pt": "A biblioteca abre às nove da manhã e fecha tarde às quintas-feiras, "
    "quando os voluntários organizam grupos de leitura.",
    "nl": "De bibliotheek gaat om negen uur 's ochtends open en sluit laat op donderdag, "
    "wanneer vrijwilligers leesgroepen voor kinderen houden.",
    "ru": "Библиотека открывается в девять утра и закрывается поздно по четвергам, "
    "когда волонтёры проводят чтения для детей.",
    "uk": "Бібліотека відкривається о дев'ятій ранку і зачиняється пізно по четвергах, "
    "коли волонтери проводять читання для дітей.",
    "pl": "Biblioteka jest otwarta od dziewiątej rano i zamykana późno w czwartki, "
    "kiedy wolontariusze prowadzą grupy czytelnicze dla dzieci.",
    "sv": "Biblioteket öppnar klockan nio på morgonen och stänger sent på torsdagar, "
    "när volontärer håller läsgrupper för barn.",
    "ja": "図書館は朝九時に開館し、木曜日はボランティアが子ども向けの読書会を開くため遅くまで開いています。",
    "zh": "图书馆早上九点开门，星期四晚上关门较晚，因为志愿者会为孩子们组织读书小组。",
    "ko": "도서관은 아침 아홉 시에 문을 열고 목요일에는 "
    "자원봉사자들이 어린이 독서 모임을 열어 늦게 닫습니다.",
    "ar": "تفتح المكتبة في التاسعة صباحا وتغلق متأخرة يوم الخميس عندما ينظم المتطوعون مجموعات قراءة للأطفال.",
    "vi": "Thư viện mở cửa lúc chín giờ sáng và đóng cửa muộn vào thứ Năm, "
    "khi các tình nguyện viên tổ chức nhóm đọc sách cho trẻ em.",
}
CANTONESE = "佢哋而家喺圖書館度睇緊書，我哋今晚唔去食飯喇，因為佢話好攰，冇時間同我哋傾偈。"


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


def batch(texts) -> pa.RecordBatch:
    return documents_batch(texts)


@pytest.mark.parametrize("lang", sorted(SENTENCES))
def test_identifies_sixteen_languages_confidently(identifier, lang):
    predicted, score = identifier.predict(SENTENCES[lang])
    assert predicted == lang
    assert score > 0.9


def test_individual_languages_fold_into_their_macrolanguage():
    folded = LanguageIdentifier().predict(CANTONESE)
    raw = LanguageIdentifier(fold_macrolanguages=False).predict(CANTONESE)
    assert raw[0] == "yue" and folded[0] == "zh"
    assert folded[1] >= raw[1]  # the macrolanguage's probability sums its members'


def test_no_letters_means_undetermined(identifier):
    for text in ["", "12345 67890 !!!", "😀🎉😀", "\ue000\ue001", "---- ++++ ===="]:
        assert identifier.predict(text) == ("und", 0.0)


def test_unexpected_scripts_get_an_answer_not_an_error(identifier):
    lang, score = identifier.predict("བོད་ཡིག་ནི་བོད་ཀྱི་ཡི་གེ་ཡིན།")  # Tibetan: the model has Dzongkha
    assert lang == "dz" and 0.0 <= score <= 1.0


def test_only_a_prefix_is_read_so_cost_is_bounded(identifier):
    long_text = SENTENCES["de"] * 40_000  # ~5 MB
    start = time.process_time()
    assert identifier.predict(long_text)[0] == "de"
    assert time.process_time() - start < 0.5


def test_language_step_adds_columns_and_removes_by_threshold_and_allow_list():
    step = LanguageFilter(LanguageSettings(allow=("en", "de"), min_score=0.5, min_score_by_words={}))  # one threshold
    texts = [SENTENCES["en"], SENTENCES["fr"], SENTENCES["de"], "42 42 42", "ok"]
    r = step(batch(texts))
    assert r.kept.column("id").to_pylist() == ["d0", "d2"]
    assert r.kept.column("lang").to_pylist() == ["en", "de"]
    assert r.kept.schema.field("lang_score").type == pa.float32()
    assert all(s > 0.9 for s in r.kept.column("lang_score").to_pylist())
    rows = {row["id"]: (row["rule"], row["value"]) for row in r.exclusions.to_pylist()}
    assert rows["d1"][0] == "language.not_allowed" and rows["d1"][1].startswith("fr:0.99")
    assert rows["d3"] == ("language.low_confidence", "und:0 < 0.5")
    assert rows["d4"][0] == "language.low_confidence"  # two letters: the model cannot tell
    assert r.stats.counters["lang.en"] == 1 and r.stats.counters["lang.fr"] == 1


def test_no_allow_list_keeps_every_confident_language():
    r = LanguageFilter(LanguageSettings(min_score=0.0))(batch(list(SENTENCES.values())))
    assert r.kept.num_rows == len(SENTENCES)
    assert r.kept.column("lang").to_pylist() == list(SENTENCES)


def _py3langid_reference(model, text: str) -> tuple[str, float]:
    """What the step computed per document before the batch path: py3langid's own rank(), folded."""
    import regex

    from platform_assets.cleaning.language_id import MACROLANGUAGES

    sample = text[:2048]
    if not regex.search(r"\p{L}", sample):
        return "und", 0.0
    folded: dict[str, float] = {}
    for label, prob in model.rank(sample):
        key = MACROLANGUAGES.get(label, label)
        folded[key] = folded.get(key, 0.0) + prob
    best = max(folded, key=folded.__getitem__)
    return best, float(folded[best])


def test_batch_prediction_is_py3langids_bit_for_bit(identifier):
    import random
    import unicodedata

    from py3langid.langid import MODEL_FILE
    from py3langid.langid import LanguageIdentifier as Py3LangId

    model = Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    rng = random.Random(7)
    pieces = [*SENTENCES.values(), CANTONESE]
    texts = ["", "12 + 34 = 46", "x", "ǂ", "ÉCRIT EN MAJUSCULES, CE TEXTE EST LU EN MINUSCULES.",
             unicodedata.normalize("NFD", SENTENCES["fr"]), "é" * 3000, SENTENCES["de"] * 40]
    for _ in range(150):  # mixtures, cuts anywhere (mid-word, mid-character sequence), repeats
        text = " ".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        texts.append(text[rng.randint(0, 40): rng.randint(1, len(text))])
    expected = [_py3langid_reference(model, t) for t in texts]
    assert identifier.predict_many(texts) == expected  # the compiled walk, the score matrix (>= 32 texts)
    assert [identifier.predict(t) for t in texts[:40]] == expected[:40]  # one by one: one-row scoring
    assert identifier.predict_many(texts[:5]) == expected[:5]
