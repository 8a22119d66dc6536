"""Result values that one package produces and another reads: a scenario's rows (:mod:`.scenario`, produced by
``perfcast.scenarios``) and the ``validation.json`` file (:mod:`.validation`, written by ``perfcast.validate``).

``perfcast.report`` formats them without importing their producers. :mod:`.serialize` holds :func:`to_json`, the one
serializer of every layer's result types (keys from field names). This package imports nothing from perfcast.
"""
