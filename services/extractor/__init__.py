"""DocumentExtractor: turns an uploaded document into plain text for the DocumentProfessor."""
