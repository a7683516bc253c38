"""Sphinx extension: include each script once per page.

Under Jupyter Book 1.0.4, sphinx-thebe's and sphinx-togglebutton's inline scripts are added twice (once with
filename None, once with filename ""), and the browser
then reports "Identifier 'THEBE_JS_URL' has already been declared" on every page.
"""


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen, kept = set(), []
    for script in context.get("script_files", []):
        attrs = getattr(script, "attributes", {}) or {}
        key = (str(getattr(script, "filename", script) or ""), tuple(sorted((k, str(v)) for k, v in attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    if "script_files" in context:
        context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
