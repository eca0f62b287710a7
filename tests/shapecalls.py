"""The request both the simulator's shape tests and the fake provider's send: one
household question, and the calculator tool in OpenAI's shape."""

USER = 'Household:\n{"adults": [{"employment_income": 24000}]}\nWhat is its annual net income?'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "net income of a household",
            "parameters": {"type": "object", "properties": {"household": {"type": "object"}}},
        },
    }
]
