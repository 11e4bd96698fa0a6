"""specrepro: reproduce LLM-serving performance and accuracy claims."""
