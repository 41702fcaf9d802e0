"""The annotator's own HTTP and WebSocket routes, served by the same server as the Streamlit pages (`st.App`).

What must react per keypress or per frame (the step player, the recorder) runs in the browser and talks to these
routes; Streamlit keeps the pages, forms and the store.
"""
