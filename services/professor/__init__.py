"""DocumentProfessor: classifies a document's extracted text and extracts its fields.

Default rules plus an optional per-tenant rules file decide the type; the result has a confidence.
"""
