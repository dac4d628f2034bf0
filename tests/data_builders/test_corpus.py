"""BM25 retrieval, the Search-R1 retrieval API (client + server on loopback) and the 2Wiki question loader."""

from __future__ import annotations

import json

import pytest

from procrl.data_builders.search_qa import load_corpus, load_qa_questions, open_index
from procrl.retrieval import (
    BM25Index,
    Passage,
    RetrieverClient,
    RetrieverServer,
    format_passages,
    parse_retrieve_response,
)
from procrl.scripts.serve_retriever import main, make_parser


@pytest.fixture(scope="module")
def wiki_index():
    return open_index("2wiki_corpus_sample")


def test_shipped_files_consistent():
    corpus = load_corpus("2wiki_corpus_sample")
    titles = {p.title for p in corpus}
    assert len(corpus) == 1467
    questions = load_qa_questions()
    assert len(questions) == 200
    # every supporting title of the shipped questions is in the shipped corpus (the slice keeps them all)
    from importlib.resources import files

    raw = files("procrl.data_builders").joinpath("data", "2wiki_dev_sample.jsonl").read_text().splitlines()
    for line in raw:
        assert set(json.loads(line)["supporting_titles"]) <= titles


def test_retrieves_supporting_paragraph(wiki_index):
    # Q1 "When did Lothair Ii's mother die?": supporting paragraphs "Lothair II" and "Ermengarde of Tours"
    q = load_qa_questions(end=1)[0]
    top = wiki_index.search([q["question"]], topk=3)[0]
    assert "Lothair II" in [p.title for p in top]
    # the bridge hop: a query naming the mother retrieves her paragraph first, with the gold date in it
    hop2 = wiki_index.search(["Ermengarde of Tours date of death"], topk=3)[0]
    assert hop2[0].title == "Ermengarde of Tours" and "20 March 851" in hop2[0].text
    assert all(hop2[i].score >= hop2[i + 1].score > 0 for i in range(len(hop2) - 1))


def test_search_edge_cases():
    index = BM25Index.build([{"title": "A", "text": "alpha beta"}, Passage("B", "gamma delta")])
    out = index.search(["", "the of and", "zzzqq", "gamma", "alpha gamma"], topk=5)
    assert out[0] == [] and out[1] == [] and out[2] == []  # empty, stopwords only, out of vocabulary: nothing
    assert [p.title for p in out[3]] == ["B"]  # score-0 passage A is not returned
    assert len(out[4]) == 2  # topk 5 capped at the corpus size
    assert index.search([], topk=3) == []
    with pytest.raises(TypeError):
        index.search("alpha", topk=1)
    with pytest.raises(ValueError):
        index.search(["alpha"], topk=0)
    with pytest.raises(ValueError):
        BM25Index.build([])


def test_save_load_roundtrip(tmp_path, wiki_index):
    small = BM25Index.build(load_corpus("2wiki_corpus_sample")[:50])
    small.save(tmp_path / "idx")
    loaded = BM25Index.load(tmp_path / "idx")
    queries = ["Lothair II queen", "Teutberga"]
    assert loaded.search(queries, topk=3) == small.search(queries, topk=3)
    with pytest.raises(FileNotFoundError):
        BM25Index.load(tmp_path)


@pytest.mark.slow  # starts the retriever server
def test_server_client_roundtrip_loopback():
    index = BM25Index.build(load_corpus("2wiki_corpus_sample")[:100])
    queries = ["Lothair II", "Teutberga queen"]
    with RetrieverServer(index) as server:
        assert server.host == "127.0.0.1"
        got = RetrieverClient(server.base_url).search(queries, topk=2)
    expected = index.search(queries, topk=2)
    assert [[p.title for p in r] for r in got] == [[p.title for p in r] for r in expected]
    assert got[0][0].text == expected[0][0].text
    assert got[0][0].score == pytest.approx(expected[0][0].score)


def test_client_parses_search_r1_contents():
    # Search-R1's server returns {"document": {"id", "contents": '"Title"\ntext'}, "score": s}
    body = {"result": [[{"document": {"id": "1", "contents": '"Paris"\nCapital of France.'}, "score": 3.5}], []]}
    assert parse_retrieve_response(body, 2) == [[Passage("Paris", "Capital of France.", 3.5)], []]
    # without scores, the documents themselves
    assert parse_retrieve_response({"result": [['"X"\ny']]}, 1) == [[Passage("X", "y", None)]]
    with pytest.raises(RuntimeError):
        parse_retrieve_response({"result": []}, 1)


def test_client_unreachable_raises():
    client = RetrieverClient("http://127.0.0.1:9", timeout_s=1, max_retries=0)
    with pytest.raises(RuntimeError, match="failed"):
        client.search(["x"])


def test_format_passages():
    text = format_passages([Passage("A", "a."), Passage("B", "b.", 1.0)])
    assert text == "Doc 1 (Title: A) a.\nDoc 2 (Title: B) b."


def test_load_qa_questions_aliases(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [
        {"question": "Q1?", "answer": "Paris", "aliases": ["City of Light", "Paris"]},
        {"question": "Q2?", "golden_answers": ["x", "y"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    ds = load_qa_questions(path)
    assert ds[0]["golden_answers"] == ["Paris", "City of Light"]  # answer first, duplicates dropped
    assert ds[1]["golden_answers"] == ["x", "y"]
    assert ds[0]["id"] == "q/0" and ds[1]["id"] == "q/1"
    assert "Question: Q1?" in ds[0]["prompt"][0]["content"]
    # the prompt holds no example inside answer tags (the answer must come from the completion only)
    assert "<answer> " not in ds[0]["prompt"][0]["content"].split("answer tags")[0]
    path.write_text(json.dumps({"question": "Q?", "answer": ""}))
    with pytest.raises(ValueError):
        load_qa_questions(path)
    with pytest.raises(ValueError):
        load_qa_questions("2wiki_dev_sample", start=10, end=5)


def test_main_rejects_missing_index(tmp_path):
    with pytest.raises(FileNotFoundError):
        main(["--index", str(tmp_path / "nope.jsonl")])


def test_serve_retriever_help_config_and_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "--index" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # --index is required
        main([])
    config = tmp_path / "serve.yaml"
    config.write_text("index: 2wiki_corpus_sample\nport: 8011\n")
    (args,) = make_parser().parse_args_and_config(["--config", str(config), "--port", "8012", "--topk", "5"])
    assert (args.index, args.host, args.port, args.topk, args.save) == (
        "2wiki_corpus_sample",
        "127.0.0.1",
        8012,
        5,
        None,
    )
    with pytest.raises(ValueError, match="--topk"):
        make_parser().parse_args_and_config(["--index", "x", "--topk", "0"])




def test_worked_search_example_comes_first_and_matches_the_environment_layout():
    from procrl.data_builders.search_qa import SEARCH_EXAMPLE_QUESTION, SEARCH_EXAMPLE_REPLY, SEARCH_PROMPT
    from procrl.rewards.qa import em_reward
    from procrl.rewards.stepgap.trace import question_from_prompt
    from procrl.trainers.search_env import SearchEnvironment

    plain = load_qa_questions(end=2)[0]
    shot = load_qa_questions(end=2, example=True)[0]
    assert len(plain["prompt"]) == 1
    assert [m["role"] for m in shot["prompt"]] == ["user", "assistant", "user"]
    assert shot["prompt"][0]["content"] == SEARCH_PROMPT.replace("{question}", SEARCH_EXAMPLE_QUESTION)
    assert shot["prompt"][-1] == plain["prompt"][0]  # the real question is the last user turn, unchanged
    assert question_from_prompt(shot["prompt"]) == plain["question"]
    # the example's information blocks are byte-identical to what SearchEnvironment appends after a search
    env = SearchEnvironment(retriever=None)
    einstein = Passage("Albert Einstein", "Albert Einstein (14 March 1879 - 18 April 1955) was a German-born "
                       "theoretical physicist.")  # fmt: skip
    assert "<search> Albert Einstein born </search>" + env.information([einstein]) in SEARCH_EXAMPLE_REPLY
    # the example's answer inside the prompt is never credited: EM reads the completion only
    assert em_reward([shot["prompt"]], ["<think>no idea</think>"], golden_answers=[["Albert Einstein"]]) == [0.0]
