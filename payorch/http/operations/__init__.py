"""The operations behind the API and the console: one module per resource, each function one thing a
merchant's admin or server asks of payorch (create a session, link a provider, rotate a secret...).

An API route parses the request, calls one operation and writes its answer; a console page parses
its form, calls the same operation and renders a page. So ownership (`auth.application_for`),
validation, rate limits and the effects on the actors and caches are written once, here, whoever
calls. An operation is handed what it uses, the `Services` of the running app and the `Principal`
calling, and reads nothing of the request itself.
"""
