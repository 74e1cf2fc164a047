"""Why a SchemaStore schema compiles slowly under ``--engine auto``: for each schema over 1 s in a
``schemastore.py --engine auto`` result, the normalizer's time (or its refusal) and whether llguidance takes
the core form (or why not). Usage: ``PYTHONPATH=. python bench/schemastore_slow.py RESULT.json``."""
import sys, json, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
import schemastore
from pathlib import Path
d = json.load(open(sys.argv[1]))
names = [r['name'] for r in sorted([r for r in d['rows'] if 'seconds' in r and r['seconds']>1.0], key=lambda r:-r['seconds'])]
schemas, rows = schemastore.extract(Path("/work/.mirror/SchemaStore+schemastore/repo"))
reg = schemastore.registry_of(schemas)
from typedlm.grammar.schema import prepare_schema
from typedlm.grammar.llg import LLGrammar, llg_grammar, llg_tokenizer, NotForLLGuidance
from typedlm.bench.jsonschema_suite import default_grammars
from typedlm.errors import GrammarCompileError
g = default_grammars(); tok = llg_tokenizer(g.tokenizer_info)
for n in names:
    t=time.time()
    try:
        core = prepare_schema(schemas[n], registry=reg, deadline=time.monotonic()+25)
    except GrammarCompileError as e:
        print(n, "normalize", round(time.time()-t,2), "REFUSED", e.keyword, flush=True); continue
    tn = time.time()-t
    t=time.time()
    try:
        LLGrammar(tok, llg_grammar(core, any_whitespace=True, max_whitespace=16, strict=False)); r="llg ok"
    except NotForLLGuidance as e: r = "NOT " + str(e)[:120]
    print(n, "normalize", round(tn,2), "llg", round(time.time()-t,3), r, flush=True)
