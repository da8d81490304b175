"""Documents: plain text (text.py) and HTML (html_document.py) taken apart into sentences and put back together after
their translation (translate.py), files of several formats (files.py: .txt, .html, .srt, .docx), and the language of a
text detected (detect.py)."""
